"""The prefix cache: unreferenced KV blocks kept per session, evicted least-recently-used first.

vLLM hashes each full 16-token block by its content and chain; a new prompt hits the longest
chain of cached blocks. In the twin a session's next prompt starts with its previous context, so
"the chain of session S" is one number, its cached block count. Freed blocks go to the tail of
vLLM's free queue in reverse order and eviction pops the head, so the least recently freed
session loses its tail blocks first, which is what `evict` does. The pool of blocks in use is the
engine's business; this class only tracks the evictable ones.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    def __init__(self) -> None:
        self._blocks: OrderedDict[str, int] = OrderedDict()
        self.total = 0  # unreferenced, evictable blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def cached(self, key: str) -> int:
        return self._blocks.get(key, 0)

    def take(self, key: str, max_blocks: int) -> tuple[int, int]:
        """Claims the session's prefix for a new request: (hit blocks, blocks freed outright).

        The entry leaves the cache either way: the hit blocks become the request's, and blocks
        past the new prompt (rare) go back to the free pool.
        """
        have = self._blocks.pop(key, 0)
        if not have:
            return 0, 0
        self.total -= have
        hit = min(have, max(max_blocks, 0))
        return hit, have - hit

    def release(self, key: str, blocks: int) -> int:
        """A finished or preempted request's full blocks stay cached, most recently used.

        Returns the blocks freed outright (a duplicate prefix already cached for the key).
        """
        if blocks <= 0 or not key:
            return max(blocks, 0)
        old = self._blocks.pop(key, 0)
        keep = max(old, blocks)
        self._blocks[key] = keep
        self.total += keep - old
        return old + blocks - keep

    def evict(self, blocks: int) -> int:
        """Evicts up to `blocks` least-recently-used blocks; returns how many went."""
        gone = 0
        while gone < blocks and self._blocks:
            key, have = next(iter(self._blocks.items()))
            take = min(have, blocks - gone)
            if take == have:
                del self._blocks[key]
            else:
                self._blocks[key] = have - take  # the tail of its chain goes first
            gone += take
        self.total -= gone
        return gone
