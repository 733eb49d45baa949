"""Programs 1 and 2 of run_replay.sh: a PyTorch training run with fixed seeds and deterministic settings, and
one checksum over its final state (every parameter, buffer and optimizer state tensor).

  python3 torch_prog.py resnet        torchvision ResNet-18, batch 32, 224 x 224, SGD with momentum
  python3 torch_prog.py transformer   a 4-layer transformer encoder (d_model 512, 8 heads), AdamW
  python3 torch_prog.py cudagraph     a small CNN whose whole training step (forward, backward, SGD with momentum)
                                      is captured once with torch.cuda.graph and replayed each step on new data
  python3 torch_prog.py compiled      the same CNN under torch.compile(mode="reduce-overhead"): Inductor's
                                      forward and backward run as CUDA graphs (CUDA graph trees), SGD eagerly

KREPLAY_PROG_STEPS (default 3) steps; prints "STEP_MS <step> <ms>" per step and "CHECKSUM <hex>".
KREPLAY_PROG_EAGER_STEPS=N (default 0), for cudagraph and compiled: N steps after the graph's that launch the same
kernels on the stream, over the memory the graphs' pool still holds (a replay's cost grows with the footprint: the
comparison of a kernel node's extra pass with a stream launch's wants both over the same memory). cudagraph runs
them eagerly; compiled runs the model compiled again without CUDA graphs (mode "default"), so that Inductor's
Triton kernels, the ones inside its graphs, are the stream launches.
KREPLAY_PROG_TWIN_MB=N (default 0), for cudagraph: a tensor of N MB allocated before the warm-up, and right after
each graph step one launch of a kernel that rewrites it (the graph's rewritten bytes, for graph mode's cost: a
stream launch that writes as much as the graph, over the same allocations, each next to a graph launch so that
both see the machine in the same state; outside the checksum). KREPLAY_PROG_TWIN_RUNS=A,B,... (MiB; in place of
KREPLAY_PROG_TWIN_MB) makes the kernel change runs of those sizes, 1 MiB apart, and nothing else: it adds a tensor
that is 1 on the runs and 0 between them (a stream launch whose restores copy what a graph's copy, run for run).
KREPLAY_PROG_TWIN_SPIN=K (default 0) makes that one launch a Triton kernel that also works K multiply-adds per
element before it stores the same sum, so that it runs about as long as a graph launch (K = 700: 0.66 ms on
an H200) while it changes the same bytes."""
import functools
import hashlib
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "resnet"
steps = int(os.environ.get("KREPLAY_PROG_STEPS", "3"))
torch.manual_seed(0)
torch.cuda.manual_seed_all(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
generator = torch.Generator(device="cuda").manual_seed(1)

if which == "resnet":
    import torchvision

    model = torchvision.models.resnet18(num_classes=100).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn((32, 3, 224, 224), device="cuda", generator=generator)
    y = torch.randint(0, 100, (32,), device="cuda", generator=generator)

    def loss_of():
        return nn.functional.cross_entropy(model(x), y)
elif which in ("cudagraph", "compiled"):
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(4),
        nn.Flatten(), nn.Linear(64 * 16, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn((64, 3, 32, 32), device="cuda", generator=generator)
    y = torch.randint(0, 10, (64,), device="cuda", generator=generator)
    batches = [(torch.randn((64, 3, 32, 32), device="cuda", generator=generator),
                torch.randint(0, 10, (64,), device="cuda", generator=generator)) for _ in range(steps)]

    forward = torch.compile(model, mode="reduce-overhead") if which == "compiled" else model

    def loss_of():
        return nn.functional.cross_entropy(forward(x), y)
else:
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=4), nn.Linear(512, 1000)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn((16, 128, 512), device="cuda", generator=generator)
    y = torch.randint(0, 1000, (16 * 128,), device="cuda", generator=generator)

    def loss_of():
        return nn.functional.cross_entropy(model(x).reshape(-1, 1000), y)


def step():
    if which == "compiled":
        torch.compiler.cudagraph_mark_step_begin()  # a new training step: the previous graphs' outputs are done
    optimizer.zero_grad(set_to_none=True)
    loss_of().backward()
    optimizer.step()


@functools.cache
def spin_kernel():
    """The Triton kernel of spin_add, made on first use (only KREPLAY_PROG_TWIN_SPIN needs Triton)."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(x_ptr, step_ptr, n, spin, block: tl.constexpr):
        offsets = tl.program_id(0) * block + tl.arange(0, block)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        busy = x
        for _ in range(spin):
            busy = busy * 0.999999 + 1e-6
        # busy is never NaN, so this adds 0.0, but the compiler cannot drop the loop.
        total = x + tl.load(step_ptr + offsets, mask=mask) + tl.where(busy != busy, 1.0, 0.0)
        tl.store(x_ptr + offsets, total, mask=mask)

    return kernel


def spin_add(x, step, spin):
    """x += step in one Triton kernel that first works `spin` multiply-adds per element (KREPLAY_PROG_TWIN_SPIN)."""
    blocks = -(-x.numel() // 1024)
    spin_kernel()[(blocks,)](x, step, x.numel(), spin, block=1024)


torch.cuda.synchronize()
if which == "cudagraph":
    # Warm up on a side stream (the optimizer makes its state there), capture one whole step, then each step
    # copies a new batch into the captured inputs and launches the graph: every kernel runs inside the graph.
    twin_mb = int(os.environ.get("KREPLAY_PROG_TWIN_MB", "0"))
    twin_spin = int(os.environ.get("KREPLAY_PROG_TWIN_SPIN", "0"))
    runs = [int(float(mib) * 2**20) // 4 for mib in os.environ.get("KREPLAY_PROG_TWIN_RUNS", "").split(",") if mib]
    twin = torch.zeros(twin_mb * 2**20 // 4, device="cuda") if twin_mb > 0 and not runs else None
    twin_step = 1.0
    if runs:
        gap = 2**20 // 4
        twin = torch.zeros(sum(runs) + gap * len(runs), device="cuda")
        twin_step = torch.zeros_like(twin)  # x + 0.0 == x: the kernel writes every byte, changes only the runs
        at = 0
        for floats in runs:
            twin_step[at:at + floats] = 1.0
            at += floats + gap
    if twin is not None and twin_spin > 0:
        if not torch.is_tensor(twin_step):
            twin_step = torch.ones_like(twin)
        spin_add(twin, twin_step, twin_spin)  # compiled here, before the steps
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss_of().backward()
        optimizer.step()
    for i in range(steps):
        x.copy_(batches[i][0])
        y.copy_(batches[i][1])
        start = time.perf_counter()
        graph.replay()
        torch.cuda.synchronize()
        print(f"STEP_MS {i} {(time.perf_counter() - start) * 1e3:.3f}", flush=True)
        if twin is not None:
            if twin_spin > 0:
                spin_add(twin, twin_step, twin_spin)
            else:
                twin.add_(twin_step)  # one elementwise kernel
            torch.cuda.synchronize()
    for i in range(int(os.environ.get("KREPLAY_PROG_EAGER_STEPS", "0"))):
        x.copy_(batches[i % steps][0])
        y.copy_(batches[i % steps][1])
        step()
        torch.cuda.synchronize()
else:
    for i in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        print(f"STEP_MS {i} {(time.perf_counter() - start) * 1e3:.3f}", flush=True)
    if which == "compiled" and int(os.environ.get("KREPLAY_PROG_EAGER_STEPS", "0")) > 0:
        # The same Inductor kernels outside any graph: a second compilation (its own backend, so Dynamo compiles
        # again rather than reusing the graphed entry) while the first's graph pool stays allocated.
        forward = torch.compile(model, mode="default")
        for _ in range(int(os.environ["KREPLAY_PROG_EAGER_STEPS"])):
            step()
            torch.cuda.synchronize()

h = hashlib.sha256()
tensors = list(model.parameters()) + list(model.buffers())
for state in optimizer.state.values():
    tensors += [v for v in state.values() if torch.is_tensor(v)]
for tensor in tensors:
    h.update(tensor.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
print(f"RESULT {which} tensors={len(tensors)} reserved={torch.cuda.memory_reserved()}", flush=True)
print(f"CHECKSUM {h.hexdigest()[:16]}", flush=True)
