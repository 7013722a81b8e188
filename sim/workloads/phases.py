"""The phase tuple: what a step-batched replica (:mod:`sim.engine.replica_step`) runs.

A request of a diffusion-family workload is a list of phases. A phase is
``(steps, width, flops, bytes, tokens, first_output, act_bytes, stage, kernel)`` per
sample-step: ``steps`` forwards of ``width`` samples, each costing ``flops`` FLOP,
``bytes`` bytes beyond the weights, ``tokens`` tokens through the interconnect, and
holding ``act_bytes`` of activation memory per sample while it runs. ``stage`` says which
pipeline stage it belongs to (:data:`STAGE_CODES`), which decides the pool it runs on;
``kernel`` is the tuple of catalog model keys the phase runs, whose weights it streams and
whose roofline times it (:class:`sim.models.perf.StagePerfs`): a co-located text encoder,
VAE or safety checker runs at its own arithmetic intensity, not the denoiser's.
"""

DENOISE, ENCODE, VERIFY, SAFETY, DECODE, PREFILL = range(6)
STAGE_CODES = {"denoise": DENOISE, "encode": ENCODE, "verify": VERIFY, "safety": SAFETY, "decode": DECODE}

# phase tuple fields
STEPS, WIDTH, FLOPS, BYTES, TOKENS, FIRST_OUTPUT, ACT, STAGE, KERNEL = range(9)
