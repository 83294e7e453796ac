"""One simulated replica, stepping the way vLLM v1's scheduler does.

Each step:
1. Running requests come first (decode first): every decoding stream needs one KV slot and
   a new 16-token block when it crosses a block boundary. When blocks run out, the latest
   admitted running request is preempted by recompute: its blocks are freed (its full blocks
   stay in the prefix cache, evictable), its progress is dropped and it goes back to the head
   of the waiting queue.
2. Running prefills get chunks from what is left of the token budget (chunked prefill).
3. If nothing was preempted, waiting requests are admitted in order while `max_num_seqs` and the
   budget allow and their first chunk's blocks can be had (evicting unreferenced prefix blocks
   LRU). A new request first claims its session's cached prefix: those tokens are not prefilled.

Event skipping: when no prefill is in flight and nothing can be admitted, every step until the
next finish, block exhaustion or outside event is the same step, so they are taken at once.
Decoding streams are kept as aggregates (a step counter, residues of their token counts mod the
block size) so a stretch costs O(block size), not O(streams); there are no per-token objects.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass, field

from infertune_lab.sim.config import ReplicaConfig
from infertune_lab.sim.kvcache import PrefixCache
from infertune_lab.sim.records import Meters, ReplicaSample, RequestRecord, RequestSpec
from infertune_lab.sim.steptime import StepTimer

MAX_STRETCH = 1 << 20


@dataclass(slots=True, eq=False)
class _Request:
    spec: RequestSpec
    key: str  # prefix-cache key: the session, or the request itself
    seq: int  # arrival order at this replica; breaks ties deterministically
    tokens: int  # tokens to hold before decoding: the prompt plus any output before a preemption
    computed: int = 0  # tokens with KV, while prefilling
    blocks: int = 0  # blocks held, while prefilling
    out: int = 0  # output tokens so far (while decoding: at decode entry)
    entry: int = 0  # the engine's decode counter when decoding began
    base: int = 0  # while decoding, KV tokens = base + counter
    decoding: bool = False
    admitted: bool = False
    first_token: float = math.nan
    cached: int = 0
    preemptions: int = 0
    generation: int = 0  # bumps on preemption, so stale finish-heap entries are skipped
    done_at: int = 0


@dataclass
class _Decoders:
    """Aggregate of decoding streams: KV tokens of stream i at counter c are base_i + c.

    `blocks` is kept current for `counter`; moving the counter costs O(block size), whatever
    the number of streams.
    """

    block_size: int
    count: int = 0
    base_sum: int = 0
    counter: int = 0
    blocks: int = 0  # blocks all decoding streams hold at `counter`
    residues: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.residues = [0] * self.block_size

    def _blocks_of(self, base: int) -> int:
        return -(-(base + self.counter) // self.block_size)

    def add(self, base: int) -> None:
        self.count += 1
        self.base_sum += base
        self.residues[base % self.block_size] += 1
        self.blocks += self._blocks_of(base)

    def remove(self, base: int) -> int:
        """Drops a stream; returns the blocks it held."""
        held = self._blocks_of(base)
        self.count -= 1
        self.base_sum -= base
        self.residues[base % self.block_size] -= 1
        self.blocks -= held
        return held

    def crossings(self) -> int:
        """Streams that need a new block in the next step."""
        return self.residues[(-self.counter) % self.block_size]

    def new_blocks(self, steps: int) -> int:
        """Blocks the next `steps` steps allocate."""
        cycles, rest = divmod(steps, self.block_size)
        bs, c = self.block_size, self.counter + cycles * self.block_size
        return cycles * self.count + sum(self.residues[(-(c + j)) % bs] for j in range(rest))

    def step(self, steps: int) -> None:
        self.blocks += self.new_blocks(steps)
        self.counter += steps

    def steps_affordable(self, free_blocks: int) -> int:
        """The most steps from now whose new blocks fit in `free_blocks`."""
        if self.count == 0:
            return MAX_STRETCH
        bs = self.block_size
        cycles = min(free_blocks // self.count, MAX_STRETCH // bs)
        left = free_blocks - cycles * self.count
        start = self.counter + cycles * bs
        for j in range(bs):
            need = self.residues[(-(start + j)) % bs]
            if need > left:
                return cycles * bs + j
            left -= need
        return cycles * bs + bs

    def mean_context(self) -> float:
        return self.base_sum / self.count + self.counter if self.count else 0.0


class Engine:
    """A continuous-batching replica in virtual time. Not thread-safe; the fleet serialises it."""

    def __init__(self, config: ReplicaConfig, name: str = "replica-0", seed: int = 0,
                 clock: float = 0.0, sample_interval: float | None = None) -> None:
        self.config = config
        self.name = name
        self.block_size = config.block_size
        self.total_blocks = config.gpu_blocks()
        self.max_num_seqs = config.max_num_seqs
        self.timer = StepTimer(config.performance_model(), config.tp, config.noise, seed,
                               config.prefill_tokens_per_second)
        self.clock = clock
        self.counter = 0
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.prefilling: list[_Request] = []
        self.decoders = _Decoders(self.block_size)
        self.held = 0  # blocks held by prefilling requests
        self.cache = PrefixCache()
        self.meters = Meters()
        self.finished: list[RequestRecord] = []
        self.rejected: list[RequestSpec] = []
        self.samples: list[ReplicaSample] = []
        self.sample_interval = sample_interval
        self._next_sample = clock
        self._finish_heap: list[tuple[int, int, _Request]] = []
        self._seq = 0
        self.busy_seconds = 0.0

    # --- state -------------------------------------------------------------------------------
    @property
    def referenced_blocks(self) -> int:
        return self.held + self.decoders.blocks

    @property
    def kv_usage(self) -> float:
        return self.referenced_blocks / self.total_blocks

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    @property
    def outstanding(self) -> int:
        return len(self.running) + len(self.waiting)

    @property
    def capacity_tokens(self) -> int:
        return self.total_blocks * self.block_size

    def first_tokens_after(self, t: float) -> list[tuple[float, float]]:
        """(when, TTFT) of every request still here whose first token came after `t`: what a gateway
        streaming the answers has observed of them so far (finished ones are in the records)."""
        held = itertools.chain(self.running, self.waiting)
        return [(r.first_token, r.first_token - r.spec.arrival) for r in held if r.first_token > t]

    def set_max_num_seqs(self, value: int) -> None:
        if value < 1:
            raise ValueError("max_num_seqs must be >= 1")
        self.max_num_seqs = value  # running streams above the new cap finish; none are cut

    # --- input -------------------------------------------------------------------------------
    def add(self, spec: RequestSpec, now: float | None = None) -> bool:
        """Queues a request at `now` (default: its arrival). False if it can never fit the pool."""
        at = spec.arrival if now is None else now
        if self.idle and at > self.clock:
            self._sample_until(at)
            self.clock = at
        need = -(-(spec.prompt_tokens + spec.output_tokens) // self.block_size)
        if need > self.total_blocks:
            self.rejected.append(spec)
            return False
        self._seq += 1
        key = spec.session or f"\x00req-{self.name}-{self._seq}"
        self.waiting.append(_Request(spec, key, self._seq, spec.prompt_tokens))
        self.meters.arrivals += 1
        return True

    # --- time --------------------------------------------------------------------------------
    def advance(self, limit: float) -> list[RequestRecord]:
        """Steps until the clock reaches `limit`, a request finishes, or there is nothing to do.

        Returns (and clears) the records finished meanwhile.
        """
        while self.clock < limit and not self.finished and not self.idle:
            self._step(limit)
        done, self.finished = self.finished, []
        return done

    def sample_idle_until(self, t: float) -> None:
        """Records the samples of an idle stretch up to `t` (the fleet calls it once no work can come)."""
        if self.idle:
            self._sample_until(t)

    def _sample_until(self, t: float) -> None:
        if self.sample_interval is None:
            return
        while self._next_sample <= t:
            m = self.meters
            self.samples.append(ReplicaSample(self._next_sample, len(self.running), len(self.waiting),
                                              self.kv_usage, m.preemptions, m.generation_tokens))
            self._next_sample += self.sample_interval

    def _available(self) -> int:
        """Blocks an allocation can get: free plus evictable."""
        return self.total_blocks - self.referenced_blocks

    def _evict_to_fit(self) -> None:
        over = self.referenced_blocks + self.cache.total - self.total_blocks
        if over > 0:
            self.cache.evict(over)

    def _step(self, limit: float) -> None:
        """One scheduling step, or a stretch of identical decode steps."""
        bs = self.block_size
        dec = self.decoders
        preempted = False
        # 1. decode first: every running stream's next slot.
        while self.running and dec.crossings() > self._available():
            self._preempt()
            preempted = True
        # 2. running prefills take chunks of the remaining budget.
        budget = self.config.max_num_batched_tokens - dec.count
        chunks: list[tuple[_Request, int]] = []
        for req in list(self.prefilling):
            if budget <= 0 or req not in self.prefilling:
                continue
            n = min(req.tokens - req.computed, budget)
            new = -(-(req.computed + n) // bs) - req.blocks
            while new + dec.crossings() > self._available() and req in self.prefilling:
                victim = self._preempt()
                preempted = True
                chunks = [(r, k) for r, k in chunks if r is not victim]
            if req not in self.prefilling:
                continue
            req.blocks += new
            self.held += new
            chunks.append((req, n))
            budget -= n
        self._evict_to_fit_after(dec.crossings())
        # 3. admissions, only in a step without preemption.
        if not preempted:
            budget = self._admit(budget, chunks)
        if not chunks and dec.count == 0:
            if preempted:
                return  # everything was preempted; the next step admits again
            if self.running or not self.waiting:
                raise RuntimeError(f"{self.name}: scheduler made no progress")  # an invariant, not input
            # Nothing runs, so no block will ever free: the head of the queue cannot be served.
            self.rejected.append(self.waiting.popleft().spec)
            return
        self._run(chunks, limit)

    def _evict_to_fit_after(self, pending: int) -> None:
        over = self.referenced_blocks + pending + self.cache.total - self.total_blocks
        if over > 0:
            self.cache.evict(over)

    def _admit(self, budget: int, chunks: list[tuple[_Request, int]]) -> int:
        bs = self.block_size
        pending = self.decoders.crossings()
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            hit, _ = self.cache.take(req.key, (req.tokens - 1) // bs)
            computed = hit * bs
            n = min(req.tokens - computed, budget)
            new = -(-(computed + n) // bs) - hit
            if hit + new + pending > self._available():
                self.cache.release(req.key, hit)  # stays cached; the lookup repeats next step
                break
            self.waiting.popleft()
            req.computed, req.blocks = computed, hit + new
            self.held += req.blocks
            if not req.admitted:
                req.admitted = True
                req.cached = computed
                m = self.meters
                m.prompt_tokens += req.spec.prompt_tokens
                m.prefix_queries += req.tokens
                m.prefix_hits += computed
            self.running.append(req)
            self.prefilling.append(req)
            chunks.append((req, n))
            budget -= n
            self._evict_to_fit_after(pending)
        return budget

    def _run(self, chunks: list[tuple[_Request, int]], limit: float) -> None:
        dec = self.decoders
        timer = self.timer
        c = self.counter
        steps = 1
        if chunks:
            prefill = sum(n for _, n in chunks)
            dt = timer.step(dec.count, dec.mean_context(), prefill)
        else:
            dt = timer.decode(dec.count, dec.mean_context())
            steps = max(1, min(
                self._finish_heap[0][0] - c if self._finish_heap else MAX_STRETCH,
                dec.steps_affordable(self.total_blocks - self.referenced_blocks),
                math.ceil((limit - self.clock) / dt) if limit < math.inf else MAX_STRETCH,
            ))
            if steps > 1:
                dt = timer.decode(dec.count, dec.mean_context() + (steps - 1) / 2)
        dt *= timer.jitter(steps)
        self.clock += steps * dt
        self.busy_seconds += steps * dt
        self.counter += steps
        dec.step(steps)
        m = self.meters
        if dec.count:
            m.generation_tokens += steps * dec.count
            m.itl.observe(dt, steps * dec.count)
        # Samples inside the stretch see the batch as it ran, not as it is after the finishes.
        self._sample_until(self.clock)
        for req, n in chunks:
            req.computed += n
            if req.computed >= req.tokens:
                self._start_decoding(req)
        self._finish_due()
        self._evict_to_fit()

    def _start_decoding(self, req: _Request) -> None:
        self.prefilling.remove(req)
        self.held -= req.blocks
        req.blocks = 0
        req.out += 1  # the prefill's last position samples a token
        m = self.meters
        m.generation_tokens += 1
        if math.isnan(req.first_token):
            req.first_token = self.clock
            m.ttft.observe(req.first_token - req.spec.arrival)
        req.decoding = True
        req.entry = self.counter
        req.base = req.tokens - self.counter
        self.decoders.add(req.base)
        req.done_at = self.counter + req.spec.output_tokens - req.out
        heapq.heappush(self._finish_heap, (req.done_at, req.seq, req))
        # A one-token answer (or a preempted one already complete) finishes right here.

    def _finish_due(self) -> None:
        heap = self._finish_heap
        while heap and heap[0][0] <= self.counter:
            done_at, _, req = heapq.heappop(heap)
            if not req.decoding or req.done_at != done_at:
                continue  # preempted since
            self._finish(req)

    def _finish(self, req: _Request) -> None:
        kv = req.base + self.counter
        self.decoders.remove(req.base)
        req.decoding = False
        self.running.remove(req)
        self.cache.release(req.key, kv // self.block_size)
        m = self.meters
        spec = req.spec
        m.successes += 1
        m.e2e.observe(self.clock - spec.arrival)
        m.prompt_len.observe(spec.prompt_tokens)
        m.generation_len.observe(spec.output_tokens)
        self.finished.append(RequestRecord(spec, self.name, req.first_token, self.clock, req.cached,
                                           req.preemptions))

    def _preempt(self) -> _Request:
        """Preemption by recompute of the latest admitted running request."""
        victim = self.running.pop()
        if victim.decoding:
            kv = victim.base + self.counter
            victim.out += self.counter - victim.entry
            self.decoders.remove(victim.base)
            victim.decoding = False
        else:
            kv = victim.computed
            self.prefilling.remove(victim)
            self.held -= victim.blocks
        victim.blocks = victim.computed = 0
        victim.tokens = victim.spec.prompt_tokens + victim.out
        victim.preemptions += 1
        victim.generation += 1
        self.meters.preemptions += 1
        self.cache.release(victim.key, kv // self.block_size)
        self.waiting.appendleft(victim)
        return victim
