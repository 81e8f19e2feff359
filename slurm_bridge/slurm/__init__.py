"""Typed async client for slurmrestd that hides REST API version differences."""
