"""The bench's scenarios, a module each."""
