"""The benchmark's peers: the same after-sales work built on another runtime, and the harness
that measures both sides one after the other on the same machine (`side_by_side`)."""
