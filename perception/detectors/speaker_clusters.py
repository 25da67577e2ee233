"""Clustering of voice embeddings for :mod:`perception.detectors.speakers`: average linkage by cosine
with cannot-links, small clusters absorbed, alike clusters rejoined; runs of a boolean mask."""

from __future__ import annotations

import numpy as np

__all__ = ["absorb_small", "cluster", "join_alike", "runs", "runs_joined"]


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(first, last + 1)`` frame index of every run of True in ``mask``."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2])]


def runs_joined(mask: np.ndarray, max_gap: int) -> list[tuple[int, int]]:
    """Runs of True in ``mask`` (``(first, last + 1)``), joined across gaps of at most ``max_gap`` frames."""
    out: list[tuple[int, int]] = []
    for a, b in runs(mask):
        if out and a - out[-1][1] <= max_gap:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def absorb_small(vectors: list[np.ndarray], labels: list[int], seconds: list[float], cannot: np.ndarray,
                 min_s: float) -> list[int]:
    """Labels where every cluster with under ``min_s`` seconds of speech joins its most similar large cluster.

    Similarity is the mean cosine to the large cluster's members; a large cluster holding a vector
    that ``cannot`` link with one of the small cluster's (another voice of the same window) is never
    joined. Without an allowed large cluster the small one stays. Labels are renumbered 0, 1, … in
    order of first use.
    """
    total: dict[int, float] = {}
    for lab, sec in zip(labels, seconds):
        total[lab] = total.get(lab, 0.0) + sec
    large = [c for c in total if total[c] >= min_s]
    out = list(labels)
    if large:
        m = np.stack(vectors)
        for small in [c for c in total if total[c] < min_s]:
            members = [i for i, lab in enumerate(labels) if lab == small]
            options = []
            for c in large:
                others = [i for i, lab in enumerate(labels) if lab == c]
                if cannot[np.ix_(members, others)].any():
                    continue
                options.append((float((m[members] @ m[others].T).mean()), c))
            if options:
                target = max(options)[1]
                for i in members:
                    out[i] = target
    first: dict[int, int] = {}
    return [first.setdefault(lab, len(first)) for lab in out]


def join_alike(vectors: np.ndarray, labels: list[int], seconds: np.ndarray, cannot: np.ndarray,
               threshold: float) -> list[int]:
    """``labels`` with clusters joined while two of them have centroids (``vectors`` weighted by
    ``seconds``) at cosine ``threshold`` or more and no ``cannot`` link between them; renumbered."""
    out = list(labels)
    while True:
        names = sorted(set(out))
        cents = {}
        for c in names:
            idx = [i for i, lab in enumerate(out) if lab == c]
            v = (vectors[idx] * seconds[idx, None]).sum(0)
            cents[c] = (idx, v / max(float(np.linalg.norm(v)), 1e-9))
        pairs = [(float(cents[a][1] @ cents[b][1]), a, b) for i, a in enumerate(names) for b in names[i + 1:]
                 if not cannot[np.ix_(cents[a][0], cents[b][0])].any()]
        best = max(pairs, default=None)
        if best is None or best[0] < threshold:
            break
        out = [best[1] if lab == best[2] else lab for lab in out]
    first: dict[int, int] = {}
    return [first.setdefault(lab, len(first)) for lab in out]


def cluster(vectors: list[np.ndarray], threshold: float, groups: list[int] | None = None,
            cannot: np.ndarray | None = None) -> list[int]:
    """Average-linkage clustering of unit vectors by cosine; returns a label per vector (0, 1, … by first use).

    Vectors with the same ``groups`` value, or a True in the ``cannot`` matrix, never merge: the
    local speakers of one segmentation window are different people by construction.
    """
    if not vectors:
        return []
    m = np.stack(vectors)
    sim = m @ m.T
    if groups is not None:
        g = np.asarray(groups)
        sim = np.where((g[:, None] == g[None, :]) & ~np.eye(len(g), dtype=bool), -1e3, sim)
    if cannot is not None:
        sim = np.where(cannot, -1e3, sim)
    groups: list[list[int]] = [[i] for i in range(len(vectors))]
    while len(groups) > 1:
        best, pair = -2.0, (0, 0)
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                s = float(sim[np.ix_(groups[a], groups[b])].mean())
                if s > best:
                    best, pair = s, (a, b)
        if best < threshold:
            break
        a, b = pair
        groups[a] += groups.pop(b)
    groups.sort(key=min)
    labels = [0] * len(vectors)
    for g, members in enumerate(groups):
        for i in members:
            labels[i] = g
    return labels
