"""Where campaigns live and how a user names one.

`.okgit/campaigns/<id>/` holds journal.jsonl (the campaign's events), report.md, report.diff
(the combined patch), ops/<op>.diff (each problem's own patch) and result.json. A campaign
id has a run id's form (UTC time and 4 hex digits).

A campaign is named `campaign:<id>`, `campaign:<prefix>`, `campaign:latest` or
`campaign:latest~N`. The `campaign:` prefix keeps the REF grammar unambiguous: a run id or
its prefix is digits and hex, a tag starts with `okgit/`, and no run id, prefix or tag
contains a colon, so `apply`, `revert`, `verify`, `show`, `history` and `watch` can take a
campaign wherever they take a run.
"""

from __future__ import annotations

from pathlib import Path

from okgit.errors import OkgitError
from okgit.git.repo import Repo
from okgit.git.rundir import RunDir
from okgit.git.workspace import newest_first, resolve_among
from okgit.journal.campaign import CAMPAIGN_EVENTS, CampaignStarted
from okgit.journal.files import read_events

PREFIX = "campaign:"


def campaigns_dir(repo: Repo) -> Path:
    return repo.okgit_dir / "campaigns"


def is_campaign_ref(ref: str) -> bool:
    return ref.startswith(PREFIX) and not Path(ref).is_file()


def campaign_ids(repo: Repo) -> list[str]:
    """Every campaign, newest first (by the time of its first event, else its id)."""
    return newest_first(campaigns_dir(repo))


def resolve_campaign(repo: Repo, ref: str) -> str:
    """The campaign id `campaign:...` names (the same spellings as a run's after the prefix)."""
    if not ref.startswith(PREFIX):
        raise OkgitError(f"not a campaign: {ref} (campaigns are named campaign:<id> or campaign:latest)")
    return resolve_among(campaign_ids(repo), ref[len(PREFIX):], "campaign",
                         "no campaigns yet (start one with: okgit optimize DIR/)")


def campaign_dir(repo: Repo, campaign_id: str) -> Path:
    path = campaigns_dir(repo) / campaign_id
    if not campaign_id or "/" in campaign_id or campaign_id.startswith(".") or not path.is_dir():
        raise OkgitError(f"unknown campaign: {campaign_id}")
    return path


def campaign_diff(repo: Repo, ref: str) -> str:
    """The combined patch of the campaign `ref` names, refusing one without any."""
    campaign_id = resolve_campaign(repo, ref)
    return RunDir(campaign_dir(repo, campaign_id)).winner_diff(
        f"campaign {campaign_id}", f"campaign {campaign_id} has no report.diff yet (still running or interrupted); "
        f"see okgit history {PREFIX}{campaign_id}", lambda: "nothing passed every gate")


def campaign_checked_on(repo: Repo, ref: str) -> tuple[str, str] | None:
    """(device, backend) the campaign `ref` names ran on, as its campaign_started event says."""
    events, _ = read_events(campaign_dir(repo, resolve_campaign(repo, ref)) / "journal.jsonl", models=CAMPAIGN_EVENTS)
    started = next((e for e in events if isinstance(e, CampaignStarted)), None)
    return (started.device, started.backend) if started else None
