"""The PyTorch training step that torch_step.py (checks (a) and (e)) and torch_lockstep.py (check (d)) run:
torchvision's ResNet-18 when torchvision is there, else a small CNN; fixed seeds, deterministic algorithms, one
batch made once on the device. Importing this module imports torch (it does not initialise CUDA)."""
import hashlib
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


class TrainingStep:
    """One model, its optimizer and its batch on the GPU. `before_cuda`, if given, is called after the model is
    made on the host and before anything touches the device (check (a) reads cuMemGetInfo there)."""

    def __init__(self, before_cuda=None):
        torch.manual_seed(0)
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        try:
            import torchvision

            model = torchvision.models.resnet18(num_classes=100)
            shape, self.name = (32, 3, 224, 224), "resnet18"
        except ImportError:
            model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 100))
            shape, self.name = (64, 3, 64, 64), "small-cnn"
        if before_cuda is not None:
            before_cuda()
        self.model = model.cuda()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.generator = torch.Generator(device="cuda").manual_seed(1)
        self.x = torch.randn(shape, device="cuda", generator=self.generator)
        self.y = torch.randint(0, 100, (shape[0],), device="cuda", generator=self.generator)

    def __call__(self):
        """One training step, queued (not synchronised)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.optimizer.step()

    def digest(self):
        """The first 16 hex digits of the SHA-256 of every parameter and buffer, in order."""
        h = hashlib.sha256()
        for tensor in list(self.model.parameters()) + list(self.model.buffers()):
            h.update(tensor.detach().cpu().numpy().tobytes())
        return h.hexdigest()[:16]
