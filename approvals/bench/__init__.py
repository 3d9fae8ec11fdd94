"""The benchmark (`manage.py bench`): its scenarios, registered by name (`registry`, one
module each in `scenarios/`), what they share, and its peers: the same after-sales work built
on another runtime, and the harness that measures both sides one after the other on the same
machine (`side_by_side`)."""
