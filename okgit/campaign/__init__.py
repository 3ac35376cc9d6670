"""Campaigns: a directory of op files, or a whole model's top modules, optimized as one.

plan: the pre-screen and the budget split; core: the problems as normal runs; result: the
report, result.json and the combined patch; store: campaign directories and `campaign:` refs;
directory: `okgit optimize DIR/`; profile and probe: `okgit profile MODEL.py`; extract and
model: `okgit optimize MODEL.py --campaign`. See docs/campaigns.md.
"""
