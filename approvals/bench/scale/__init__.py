"""The scale scenario's history and its curves."""
