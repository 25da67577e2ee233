"""Committed segments → rule signals: the local matcher and the plain-language rule compiler."""
