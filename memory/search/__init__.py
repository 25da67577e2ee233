"""Search: query understanding, candidates, ranking, search cards, index maintenance, time cuts, modes."""

from .modes import SearchMode, build_where, sql_in, sql_literal

__all__ = ["SearchMode", "build_where", "sql_in", "sql_literal"]
