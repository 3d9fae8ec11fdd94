"""Notifications (`notifications`: who is told what) and the one outbox that sends them
(`outbox`: written with the news, claimed once per attempt, retried with backoff)."""
