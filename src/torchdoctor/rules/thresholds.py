"""Every threshold the rules use (trace and run level), each with the reason it sits where it does.

Shares are fractions of the mean step time. A rule fires at ``*_WARN`` and becomes critical at
``*_CRITICAL``. They are deliberately round numbers: the evidence printed with each finding lets a
user judge a borderline case, and docs/rules.md lists them all.

Each value is a :class:`Threshold`: a ``float`` that also carries its ``reason``, so the registry
(``rules/registry.py``) and the documentation can show why a finding fired where it did.
"""

from __future__ import annotations

from torchdoctor.analysis.definitions import KERNEL_LATENCY_US
from torchdoctor.memory.fragmentation import FRAGMENTATION, FRAGMENTATION_MIN_BYTES
from torchdoctor.threshold import Threshold

# Defined where they are measured (the analysis, the memory judgement), read by the rules.
__all__ = ["FRAGMENTATION", "FRAGMENTATION_MIN_BYTES", "KERNEL_LATENCY_US", "Threshold"]


def all_thresholds() -> dict[str, Threshold]:
    """Every threshold of this module by name (for docs and tests)."""
    return {k: v for k, v in globals().items() if isinstance(v, Threshold)}


# -- severity defaults ------------------------------------------------------------------------
WARNING_SHARE = Threshold(0.05, "below 5% of the step a finding is within run-to-run noise")
CRITICAL_SHARE = Threshold(0.25, "a finding costing a quarter of the step or more is critical")

NOISE_FLOOR = Threshold(
    0.01,
    "a saving under 1% of the step is below run-to-run noise: such a finding is never a warning "
    "(risk findings, about memory or numerics rather than time, aside)",
)

# -- trace findings ----------------------------------------------------------------------------
DEPENDENCY_WARN = Threshold(0.05, "queued work held back for 5% of the step")
DEPENDENCY_CRITICAL = Threshold(0.25, "a quarter of the step with work queued but not running")
INPUT_WARN = Threshold(
    0.05, "the step starting idle for 5% of it while the CPU produces the batch outside torch"
)
DATA_WARN = Threshold(
    0.05, "data loading visible for 5% of the step: workers or prefetch usually remove all of it"
)
DATA_CRITICAL = Threshold(0.25, "a quarter of the step spent waiting for batches")

HOST_WARN = Threshold(
    0.10,
    "GPU waiting on late launches for 10% of the step: compile/CUDA graphs usually pay above it",
)
HOST_CRITICAL = Threshold(0.30, "a third of the step lost to launch overhead")

SYNC_WARN = Threshold(
    0.02, "synchronisation stalls of 2% of the step: each is a drained queue, cheap to remove"
)
SYNC_MIN_MS = Threshold(
    0.05, "at least 50 us per step, so one end-of-run synchronize does not fire the rule"
)
SYNC_CRITICAL = Threshold(0.15, "a sixth of the step idle behind host syncs")

PAGEABLE_MIN_BYTES = Threshold(
    1 << 20, "pageable host-to-device copies of 1 MiB or more per step (smaller ones cost little)"
)
PAGEABLE_WARN = Threshold(0.02, "pageable copy time of 2% of the step: pinning is one argument")
PAGEABLE_CRITICAL = Threshold(0.10, "a tenth of the step in slow, blocking copies")
PINNED_SPEEDUP = Threshold(
    2.0, "pinned copies reach about twice the bandwidth of pageable ones and run asynchronously"
)

EXPOSED_COMM_WARN = Threshold(
    0.05, "communication the step waits for, above 5%: DDP can normally hide it under backward"
)
EXPOSED_COMM_CRITICAL = Threshold(0.20, "a fifth of the step waiting for collectives")

LOW_UTIL_BUSY = Threshold(
    0.60, "GPU busy under 60% of the step is low utilisation for a training or inference loop"
)

UNFUSED_SHARE = Threshold(
    0.40,
    "elementwise/copy/reduction kernels taking 40% of device time or more: in the corpus's "
    "GEMM- or convolution-bound training steps (ResNet-50, GPT-2, recommender, DDP conv net) "
    "they take 20-38%; above 40% memory-bound glue, not matrix math, sets the pace",
)
UNFUSED_BUSY = Threshold(
    0.60,
    "the device busy for 60% of the step or more: below it the host sets the pace and faster "
    "kernels do not shorten the step (host-bound says what does)",
)
FUSION_SAVING = Threshold(
    0.50,
    "the share of unfused elementwise/reduction time fusion is assumed to remove: fusing a "
    "chain of two same-sized elementwise operators turns four tensor passes into two, longer "
    "chains save more, a lone operator nothing; it stands in for the fusion floor because "
    "a trace does not show which intermediates a fused kernel would keep out of memory",
)

FP32_GEMM_SHARE = Threshold(
    0.50, "half or more of GEMM/convolution time in fp32 SIMT kernels on a tensor-core GPU"
)
MATMUL_MIN_SHARE = Threshold(
    0.20, "GEMM/convolution at least 20% of GPU time, so the change matters"
)
TENSOR_CORE_SPEEDUP = Threshold(
    2.0, "a conservative speed-up for moving fp32 GEMMs to tensor cores (peak ratios are 8-16x)"
)
FP32_GEMM_WARN = Threshold(0.05, "the saving from tensor cores above 5% of the step")
FP32_GEMM_CRITICAL = Threshold(0.20, "tensor cores would save a fifth of the step")

MEMORY_PRESSURE = Threshold(
    0.90, "peak reserved memory above 90% of the device: the next size up will not fit"
)
STRAGGLER = Threshold(
    0.10, "a rank whose own work is 10% above the median makes every other rank wait"
)
STRAGGLER_CRITICAL = Threshold(0.30, "a rank 30% slower than the median")

# -- run-level findings (torchdoctor check) ----------------------------------------------------
DATA_WAIT_SHARE = Threshold(0.05, "data wait above 5% of the step is worth hiding behind workers")
DATA_WAIT_MIN_MS = Threshold(
    0.5,
    "and at least 0.5 ms per step: handing a batch over from a worker process costs about that "
    "much itself, so a smaller wait is not removed by workers (a 0.2 ms collate of a tiny step)",
)
PAGEABLE_GBPS = Threshold(
    8.0, "host-to-device GB/s from pageable memory: the copy is synchronous at this rate"
)
GEMM_SPEEDUP_SAVING = Threshold(
    0.5, "share of GEMM time saved by bf16 or TF32 tensor cores over fp32 (at least 2x faster)"
)
GEMM_MIN_SHARE = Threshold(0.2, "GEMMs at least 20% of GPU time before precision matters")
GRAPH_BREAK_SHARE = Threshold(
    0.05,
    "share of the step lost per distinct graph break (guards, a resume frame, and no fusion "
    "across the break), capped at GRAPH_BREAK_MAX_SHARE",
)
GRAPH_BREAK_MAX_SHARE = Threshold(0.5, "graph breaks never claim more than half the step")
DATA_PARALLEL_SHARE = Threshold(
    0.23,
    "DataParallel re-replicates the model every step under the GIL; DDP is typically >= 1.3x "
    "faster on one node, so about 23% of the step",
)
TINY_OPS_PER_STEP = Threshold(
    100, "a CPU step with at least this many top-level operators, most tiny, is overhead bound"
)
TINY_OP_THRESHOLD_US = Threshold(
    20.0,
    "an operator shorter than this (CPU wall, us) is dominated by framework overhead: dispatch "
    "plus the Python around it costs a few microseconds per op on a modern CPU",
)
TINY_OP_SAVING = Threshold(
    0.7, "share of tiny-op time and Python time between ops that fusing (torch.compile) removes"
)
SYNC_PER_STEP = Threshold(0.5, "a sync site called at least every other step is in the loop")
COMPUTE_BOUND_GEMM_SHARE = Threshold(
    0.5,
    "GEMMs/convolutions hold half or more of the operator time: the step is compute, not "
    "framework overhead, however many small ops surround them",
)
RECOMPUTE_WARN = Threshold(
    0.05, "activation checkpointing recomputing forward work worth 5% of the step or more"
)

# -- inference and CUDA graphs -----------------------------------------------------------------
GRAPH_COVERAGE_WARN = Threshold(
    0.90,
    "under 90% of the device time inside CUDA/HIP graphs while graphs are replayed: the eager "
    "rest pays a launch per kernel (vLLM's piecewise mode leaves attention out by design)",
)
PREFILL_STEP_MAX_MS = Threshold(
    100.0,
    "a prefill step longer than 100 ms holds every decode request batched with or queued "
    "behind it for as long: under 10 tokens/s for them (interactive serving budgets 20-100 ms "
    "per output token)",
)
PREFILL_MIN_TOKENS = Threshold(
    256,
    "prefill chunks under 256 tokens leave the GEMMs memory-bound (a few rows against all the "
    "weights), so the fixed per-step cost is amortised over few tokens",
)
DECODE_BANDWIDTH_TARGET = Threshold(
    0.80,
    "decode GEMMs and attention that stream weights and the KV cache reach about 80% of peak "
    "memory bandwidth when well tuned; the gap to it is what faster kernels or a larger batch "
    "can win",
)
OVERSUBSCRIBED_MARGIN = Threshold(
    0.5,
    "runnable threads (intra-op threads plus busy DataLoader workers) above the free cores by "
    "half a core or more: some of them wait for a core in every parallel region",
)
OVERSUBSCRIBED_RATIO = Threshold(
    1.2,
    "the same matmul and elementwise work measured at least 1.2x slower with the script's "
    "thread count than with the suggested one (interleaved rounds, after the steps)",
)
PROBE_RATIO_PER_THREAD = Threshold(
    4.0,
    "a thread probe more than 4x slower per thread above the suggested count is not taken as "
    "the script's slow-down: the probe's work is a few 100 us regions, each held up by a time "
    "slice of whatever else runs. Measured interleaved in one process on 2 busy cores "
    "(benchmarks/bench_thread_probe_contended.py, 9 rounds, 2 threads against 1): the probe's "
    "work 0.8x [0.4-549x] at load 20 and 1131x [0-1458x] beside two busy processes, a whole "
    "batched-conv step 5.9x [1.4-15.5x] and 7.2x [2.9-10.6x], the threads' wait for a core "
    "covering the extra time each time; H200 runs printed 281x for 16 threads against 15. "
    "Real step slow-downs pass this bound too, so the step account takes the threads' wait "
    "from the steps' own counters where the probe is not taken (rules/account_rules.threads_wait)",
)
THREADS_CPU_OP_SHARE = Threshold(
    0.05,
    "on a GPU run the intra-op threads only speed up operators that compute on the CPU; when "
    "those take under 5% of the step, no thread count can win more than noise",
)
STARVED_SHARE = Threshold(
    0.3,
    "the main thread runnable but waiting for a core for 30% of the measured steps or more: "
    "the step times are those of a machine shared with other work",
)
WORKERS_IDLE = Threshold(
    0.5,
    "DataLoader workers that ran (or waited for a core) less than half of the window are idle: "
    "more of them cannot help, and a batch made in the training process may be cheaper",
)
RESTART_SHARE_OF_WAIT = Threshold(
    0.5, "worker start-up at epoch starts is at least half of the data wait: keep the workers"
)
ITEMS_WAIT_SHARE = Threshold(
    0.5,
    "a batch made in the training process whose thread ran less than half the time it did not "
    "wait for a core waits on something else (I/O, a sleep, a remote read): a worker waiting "
    "holds no core, so workers beyond the cores overlap those waits",
)
WAITING_WORKERS_MAX = Threshold(
    16,
    "workers for items that wait, at most: each is a process with its own interpreter and copy "
    "of the dataset (tens of MB forked, a whole torch import spawned), and the training process "
    "unpickles every batch they hand over; past this, reading a batch's items concurrently "
    "inside the dataset (a thread pool, one batched read) overlaps the waits for less",
)
RARE_LONG_RATIO = Threshold(
    5.0,
    "a step five times the median or longer is not noise on a busy machine (scheduling "
    "spikes here stay within 2-3x): something else ran in it (evaluation, a checkpoint)",
)
RARE_LONG_MIN_MS = Threshold(
    5.0,
    "and at least 5 ms longer than the median, so that a sub-millisecond step's hiccup (a "
    "garbage collection, a page fault, a descheduled thread) is not called a finding",
)
RARE_LONG_STARVED_SHARE = Threshold(
    0.95,
    "a typical step that waited for a CPU core 95% of its own time or more leaves too little "
    "to judge: the reading of that wait lags the step boundary by a time slice, and less it "
    "the steps are near 0 ms (minGPT at load 17: 42-64 ms waits in ~50 ms steps)",
)
RARE_LONG_LOAD_SHARE = Threshold(
    0.5,
    "a typical step that waited for a CPU core half its time or more is stretched by the load "
    "off its wait too (an intra-op thread spins while a helper waits for a core), by chance: "
    "its long steps are judged by RARE_LONG_APART",
)
RARE_LONG_APART = Threshold(
    2.0,
    "long steps under twice the longest of the rest are the tail of a loaded machine's spread "
    "(conv_lstm_step.py at load 1.8 of 2 cores: 0.8-1 s against others up to 0.52 s, 1.5x); "
    "periodic work stands apart however loaded (eval_in_loop.py: 8x, gc.collect every 7 steps "
    "in a small loop: 6x, at loads of 1.8-1.9 of 2 cores)",
)
RARE_LONG_WORK_RATIO = Threshold(
    4.0,
    "a long step that ran under four times the median step's CPU work (its thread's and "
    "helpers' time run less the thread's spin at barriers) waited for cores: "
    "control_batched_scoring.py beside two CPU hogs at load 13-20 ran 0-3.1x the median's work "
    "in every step (5 runs); eval_in_loop.py there ran 6.6-33x in its evaluation steps (6 runs). "
    "Not a clean cut: beside hogs that come and go the control read up to 11.7x in a step of "
    "4.4x the median (its helpers' spin is not taken off), so such a step stays judged as before",
)
RARE_LONG_ORDINARY_SHARE = Threshold(
    0.9,
    "a long step whose samples fall on the call chains the watcher saw in ordinary steps 90% "
    "of the time or more ran the loop's own code, not periodic work: control_batched_scoring.py "
    "under bursts of load sampled its model call in every sample of each long step; "
    "eval_in_loop.py's evaluation steps sample estimate_loss, a chain no ordinary step runs",
)
RARE_LONG_ORDINARY_WAIT_SHARE = Threshold(
    0.25,
    "and it waited for CPU cores (its thread's wait and its helpers') a quarter of its time or "
    "more: other processes slowed it. A step as long on an idle machine at an ordinary line (a "
    "library call that now and then flushes or saves) stays a finding",
)
RARE_LONG_ORDINARY_MIN_STEPS = Threshold(
    2,
    "ordinary steps sampled before their chains count as the loop's own: a short check of "
    "3-8 ms steps gets a look in only a few of them (the watcher wakes every 10 ms), and a "
    "step sampled there ended under twice the median, so its chain is no periodic work's",
)
RARE_LONG_MAX_SHARE = Threshold(
    0.49, "long steps are rare while they are fewer than half: the median is still a normal step"
)
HOUSEKEEPING_SHARE = Threshold(
    0.02,
    "torch.save, gc.collect() or a deep copy of tensors in the loop costing 2% of the step or more",
)
HOUSEKEEPING_CALLS = Threshold(
    0.5,
    "called in at least every other measured step: a call made now and then is paid by the "
    "steps it runs in (rare-long-steps), not by every step",
)
ASIDE_SHARE = Threshold(
    0.08,
    "a function (or a call from the loop) outside the model's forward, backward and the "
    "optimizer's step holding 8% of the step or more: below that, one or two samples",
)
ASIDE_MIN_SAMPLES = Threshold(
    3, "at least three stack samples: one or two may be a moment, not a habit of every step"
)
ASIDE_UPDATE_OPS = Threshold(
    0.5,
    "a helper's own operators count as work beside the step when copies and element-wise "
    "updates (copy_, clone, add, mul, lerp...) are half of their time or more",
)
SKEW_SHARE_OF_COMM = Threshold(
    0.5,
    "exposed communication that is half or more a rank waiting for later arrivals is rank "
    "skew: the fix is the late rank's work, not the collectives",
)
COMPILE_BREAK_EVEN_STEPS = Threshold(
    100,
    "a compile worth 100 steps or more is said (as info) when the job's length is unknown: "
    "shorter jobs never repay it",
)
ONE_OFF_ASSUMED_JOB_STEPS = Threshold(
    1000,
    "a one-off cost (a first evaluation, a warm-up) in a job whose length neither the run nor "
    "the script says is ranked as if spread over 1000 steps, a short training job: it then "
    "ranks above a per-step cost only when it is more than 1000 times larger",
)
ONE_OFF_FIRST_STEPS = Threshold(
    3,
    "long steps only among the run's first 3 steps are start-up work (an evaluation at "
    "iteration 0, a warm-up, workers starting): paid once per job, not every step",
)
ONE_OFF_EXCESS_SHARE = Threshold(
    0.9,
    "start-up long steps holding 90% of all long steps' excess are the finding, paid once per "
    "job: later ones holding the rest are a busy machine's spikes beside it (5-30x a "
    "sub-millisecond step was seen), not work that recurs",
)
# -- the step's account: unexplained time, modes, repeated work (torchdoctor check) ------------
EXPLAINED_EFFICIENCY = Threshold(
    1 / 3,
    "a step within 3x of its roofline (the counted FLOPs and bytes at this machine's attainable "
    "rates) is explained by its compute: eager kernels on the shapes of real models reach a third "
    "or more of those rates (measured on a 2-core CPU: an MLP step 89% of its roofline, a 32->64 "
    "channel convolution 90% of the convolution rate, a first layer of 3 channels 17%)",
)
DOMINANT_UNCOUNTED_OP = Threshold(
    0.5,
    "one compute operator whose FLOPs could not be counted (a custom operator, shapes that "
    "could not be read) holding half or more of the time inside torch operators is the step's "
    "compute: its time is explained, its efficiency unknown (below half, the counted operators "
    "carry the step and the uncounted one is judged with them)",
)
UNEXPLAINED_SHARE = Threshold(
    0.15,
    "time beyond 3x the roofline that no named finding claims, above 15% of the step: step "
    "times here vary by about 10% from step to step, so less is within noise",
)
MODE_ON_SHARE = Threshold(
    0.2,
    "a global mode (anomaly detection, determinism) on for a fifth of the sampled time or more "
    "is in the step (a context manager around the forward and backward, not a one-off)",
)
TOGGLE_GAIN = Threshold(
    0.05,
    "a mode switched for a few extra steps counts as costing time when the step ran at least 5% "
    "faster without it (median of interleaved pairs)",
)
THREADS_GAIN = Threshold(
    0.10,
    "more intra-op threads must make the step at least 10% faster (interleaved pairs) before a "
    "finding says so: on a shared machine more threads are as often slower",
)
FASTER_ROUNDS_MARGIN = Threshold(
    1.0,
    "more intra-op threads must be faster in more interleaved pairs than not (a majority, "
    "the sign of the pairs' ratios): a gain in the median alone can be one lucky pair",
)
ANOMALY_SAVING = Threshold(
    0.5,
    "anomaly detection roughly doubles a training step (measured 2.1x on an 8-layer MLP on CPU, "
    "interleaved); the estimate when check could not switch it off and measure",
)
ONEDNN_OFF_SAVING = Threshold(
    0.10,
    "oneDNN off made convolution-bound CPU steps 1.10x slower (tests/capture/cases/"
    "onednn_off_by_config.py, convolutions 88-98% of its operator time: CPU time per step "
    "1.01-1.21x in 8 of 8 interleaved fresh-process rounds) and about 1.57x "
    "(examples/unlisted/mkldnn_off.py, 5x5 convolutions: 6 of 6 rounds) on 2 loaded cores: "
    "the smaller, 10% of the step's convolution time, when check's own pairs could not tell",
)
NO_GRAD_SAVING = Threshold(
    0.15,
    "a forward without autograd recording runs about 1.2x faster on CPU (measured, 8-layer MLP, "
    "interleaved): 15% of the forward's time, when check could not measure it",
)
REPEAT_PER_STEP = Threshold(
    0.5, "construction at one line at least every other measured step is inside the loop"
)
ITER_PER_STEP = Threshold(
    0.9,
    "a DataLoader iterator started at one line (nearly) every measured step is next(iter(loader))"
    " in the step; fewer is an epoch loop over a short epoch (its workers' restarts are the "
    "DataLoader finding's: persistent_workers)",
)
FP64_SHARE = Threshold(
    0.5, "half or more of the counted FLOPs (or bytes, for a step without matmuls) in float64"
)
FP64_SAVING = Threshold(
    0.5,
    "float32 runs about twice as fast as float64 on CPUs (twice the SIMD lanes, half the bytes) "
    "and far faster on GPUs: half the float64 operator time, a conservative estimate",
)
GC_SHARE = Threshold(
    0.05, "garbage collection for 5% of the step or more (measured exactly by gc callbacks)"
)
LOOP_SAVING = Threshold(
    1.5,
    "a module stepped over slices of one tensor in a Python loop (an nn.LSTMCell over time "
    "steps, a model over the samples of a batch): the loop's forward plus its backward (about "
    "twice the forward) is 3x the forward's time, and one call on the whole tensor saves half "
    "of it: 1.5x the loop line's forward time when training, 0.5x without autograd (measured: "
    "an LSTMCell over 32 steps, 256 wide, ran 1.8x slower than nn.LSTM on CPU, interleaved; "
    "the estimate said 1.5x)",
)
LOOP_LINE_SHARE = Threshold(
    0.10,
    "a per-element Python loop line (one tensor element written per iteration) holding a tenth "
    "of the sampled step or more is the step's cause at that line: more than the 5% of noise, "
    "with room for the sampler's error on a line of a few samples",
)
MEMORY_GROWTH_PER_STEP = Threshold(
    256 * 2**10,
    "memory rising 256 KiB per step or more (Theil-Sen slope over the clean steps) is kept "
    "from step to step: 24 GiB over a 100,000-step job; less is within the drift of a healthy "
    "process (Python objects, logged floats)",
)
MEMORY_GROWTH_RISING = Threshold(
    0.7,
    "a leak adds memory after most steps (7 steps in 10 or more); a warm-up (the allocator's "
    "pools, a cache filled once) rises in a few steps and then stays flat",
)
MEMORY_GROWTH_MIN_BYTES = Threshold(
    8 * 2**20,
    "the fitted growth over the clean steps must reach 8 MiB: below that one allocator pool or "
    "one arena grown once can look like a slope over a dozen steps",
)
