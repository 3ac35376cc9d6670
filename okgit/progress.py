"""Plain-mode progress: one line per stage, printed from journal events as they are written."""

from __future__ import annotations

from typing import IO, Any, Callable


def describe(event: dict[str, Any]) -> str | None:
    t = event["type"]
    if t == "run_started":
        return f"run {event['run']}: {event['op']} on {event['device']} ({event['backend']}, {event['mode']})"
    if t == "reference":
        if event.get("timed"):
            return f"baseline: {event['runtime_us']:.1f} us"
        return f"baseline: correct on {event['device']}; timings are not claimed on a CPU"
    if t == "evaluated":
        speed = f" {event['speedup']:.2f}x" if event.get("speedup") else ""
        err = f" ({event['error']['gate']}: {event['error']['message'][:100]})" if event.get("error") else ""
        return f"  {event['cand']}: {event['status']}{speed}{err}"
    if t == "proposal":
        return f"{event['cand']} {event['origin']}: {event.get('intent') or ''}".rstrip()
    if t == "accepted":
        return f"  tagged {event['tag']}"
    if t in ("note", "interrupted"):
        return event.get("message") or f"interrupted ({event.get('reason')})"
    if t == "gate":
        return f"final gate {event['name']} on {event.get('cand')}: {'passed' if event['passed'] else 'failed'} {event.get('detail', '')}".rstrip()
    return None


def printer(stream: IO[str]) -> Callable[[dict[str, Any]], None]:
    def on_event(event: dict[str, Any]) -> None:
        line = describe(event)
        if line:
            print(line, file=stream, flush=True)

    return on_event
