"""Stand-ins for the engines' own classes, used when the engine is not importable."""
