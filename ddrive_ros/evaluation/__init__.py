"""Offline evaluation against the synthetic world."""
