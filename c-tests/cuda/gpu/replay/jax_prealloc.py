"""Issue 28's JAX program for run_replay.sh: a small MLP trained with JAX's default preallocation (XLA takes
75 % of the GPU as one allocation at start), so every launch's footprint is that allocation. Under
kreplay-cuda-replay the live host budget must decline those snapshots (HOST_BUDGET) and the program finish.
run_graphs_counters.sh runs it with preallocation off and command buffers on (issue 29). The parameters are
donated, so XLA updates them in place: a pass that does not start from the snapshot changes the result.
Prints "STEP_MS <i> <ms>" per step and "CHECKSUM <hex>" over the final parameters."""
import functools
import hashlib
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

steps = int(os.environ.get("KREPLAY_PROG_STEPS", "5"))
key = jax.random.PRNGKey(0)
k1, k2, k3 = jax.random.split(key, 3)
params = {
    "w1": jax.random.normal(k1, (1024, 2048), jnp.float32) * 0.02,
    "w2": jax.random.normal(k2, (2048, 10), jnp.float32) * 0.02,
}
x = jax.random.normal(k3, (256, 1024), jnp.float32)
y = jnp.arange(256) % 10


def loss(p):
    h = jnp.tanh(x @ p["w1"])
    logits = h @ p["w2"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(256), y])


@functools.partial(jax.jit, donate_argnums=0)
def step(p):
    g = jax.grad(loss)(p)
    return jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, p, g)


for i in range(steps):
    start = time.perf_counter()
    params = step(params)
    jax.block_until_ready(params)
    print(f"STEP_MS {i} {(time.perf_counter() - start) * 1e3:.3f}", flush=True)

h = hashlib.sha256()
for name in sorted(params):
    h.update(np.asarray(params[name]).tobytes())
print(f"RESULT jax backend={jax.default_backend()} devices={jax.devices()}", flush=True)
print(f"CHECKSUM {h.hexdigest()[:16]}", flush=True)
