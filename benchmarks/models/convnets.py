"""Conv nets in training mode, as probes: a ResNet-18-style net in plain torch (conv + BatchNorm + ReLU, residual
blocks, max and average pooling), the same with a gradient hook on its classifier, and ``transformers``' ResNet,
ConvNeXt and ViT built from small configs (no download). ``benchmarks/calibrate_numerics.py`` runs tracecheck's compiled-vs-eager judgement on them over many
seeds and batch sizes (the false-alarm rate) and on copies with deliberately injected errors (the catch rate).

``SEED`` and ``BATCH`` pick the weights and the batch size of every probe here (environment variables
``TRACECHECK_CONVNET_SEED`` / ``TRACECHECK_CONVNET_BATCH``), so one file serves every point of the sweep.
"""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

SEED = int(os.environ.get("TRACECHECK_CONVNET_SEED", "0"))
BATCH = int(os.environ.get("TRACECHECK_CONVNET_BATCH", "4"))
#: image side: 64 keeps ResNet-18's last stage at 2x2, so BatchNorm normalizes over 4·batch values per channel (at 32,
#: over batch values alone: with 2 samples its output is ±1 whatever the input, and fp32 gradients lose their digits)
SIZE = int(os.environ.get("TRACECHECK_CONVNET_SIZE", "64"))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + identity)


class ResNet18(nn.Module):
    """ResNet-18's layout (7x7 stem, max pool, four stages of two basic blocks, global average pool, fc) at a
    width of 16..128 channels, so that a CPU compiles and runs it in seconds."""

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        chans = [width, width * 2, width * 4, width * 8]
        layers, cin = [], width
        for i, c in enumerate(chans):
            layers += [BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c)]
            cin = c
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def images(batch: int = BATCH, size: int = SIZE, seed: int = SEED) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1000 + seed))


def resnet18() -> nn.Module:
    torch.manual_seed(SEED)
    return ResNet18().train()


def hf_resnet() -> nn.Module:
    import transformers

    torch.manual_seed(SEED)
    return transformers.ResNetForImageClassification(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], layer_type="basic",
        num_labels=10)).train()


def hf_convnext() -> nn.Module:
    import transformers

    torch.manual_seed(SEED)
    return transformers.ConvNextForImageClassification(transformers.ConvNextConfig(
        hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1], num_labels=10)).train()


def hf_vit() -> nn.Module:
    import transformers

    torch.manual_seed(SEED)
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=SIZE, patch_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=10)).train()


def probe_resnet18():
    return resnet18(), (images(),)


def probe_hf_resnet():
    return hf_resnet(), (images(),)


def probe_hf_convnext():
    return hf_convnext(), (images(),)


def probe_hf_vit():
    return hf_vit(), (images(),)


def _scale_grad(p: torch.nn.Parameter) -> None:
    p.grad.mul_(0.1)  # a smaller step for the classifier: a training trick that lives in a hook


def probe_resnet18_grad_hook():
    """A gradient hook on the classifier's weight (register_post_accumulate_grad_hook scales its .grad): autograd and
    the compiled runs apply it, torch.func.grad does not."""
    model = resnet18()
    model.fc.weight.register_post_accumulate_grad_hook(_scale_grad)
    return model, (images(),)
