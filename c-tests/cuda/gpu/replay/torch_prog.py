"""Programs 1 and 2 of run_replay.sh: a PyTorch training run with fixed seeds and deterministic settings, and
one checksum over its final state (every parameter, buffer and optimizer state tensor).

  python3 torch_prog.py resnet        torchvision ResNet-18, batch 32, 224 x 224, SGD with momentum
  python3 torch_prog.py transformer   a 4-layer transformer encoder (d_model 512, 8 heads), AdamW

KREPLAY_PROG_STEPS (default 3) steps; prints "STEP_MS <step> <ms>" per step and "CHECKSUM <hex>"."""
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
else:
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=4), nn.Linear(512, 1000)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn((16, 128, 512), device="cuda", generator=generator)
    y = torch.randint(0, 1000, (16 * 128,), device="cuda", generator=generator)

    def loss_of():
        return nn.functional.cross_entropy(model(x).reshape(-1, 1000), y)


def step():
    optimizer.zero_grad(set_to_none=True)
    loss_of().backward()
    optimizer.step()


torch.cuda.synchronize()
for i in range(steps):
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    print(f"STEP_MS {i} {(time.perf_counter() - start) * 1e3:.3f}", flush=True)

h = hashlib.sha256()
tensors = list(model.parameters()) + list(model.buffers())
for state in optimizer.state.values():
    tensors += [v for v in state.values() if torch.is_tensor(v)]
for tensor in tensors:
    h.update(tensor.detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
print(f"RESULT {which} tensors={len(tensors)} reserved={torch.cuda.memory_reserved()}", flush=True)
print(f"CHECKSUM {h.hexdigest()[:16]}", flush=True)
