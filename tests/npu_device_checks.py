"""The emulated npu device itself, in a process of its own (tests/test_npu.py runs this file with pytest in a
subprocess): PrivateUse1 must get its device before the autograd engine first starts its device threads, which any
earlier backward in the same process does, so these checks never share a process with other tests.

Oracles: the same computation on the CPU in the same test (float64 where it is a gradient), torch's documented
behaviour (views alias their base; the CPU refuses an overlapping copy).
"""
from __future__ import annotations

import pytest
import torch


def test_tensors_round_trip_and_views_alias_their_base(emulated_npu):
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    x = cpu.to(emulated_npu)
    assert x.device.type == "npu" and x.is_npu
    assert torch.equal(x.cpu(), cpu)
    t = x.t()  # a view: the real strides, the same memory
    assert t.stride() == (1, 4) and t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x[1].add_(100)  # in place through a view reaches the base
    assert x.cpu()[1].tolist() == [104.0, 105.0, 106.0, 107.0]


def test_in_place_and_out_ops_on_strided_views_write_where_the_cpu_writes(emulated_npu):
    """ATen's cpu_fallback writes in-place and out= results back through _copy_from_and_resize: a resize must keep
    a view's strides (a same-size resize is a no-op) or the write lands on the wrong elements."""
    on_cpu, on_npu = torch.zeros(3, 3), torch.zeros(3, 3).to(emulated_npu)
    on_cpu[:, 1].add_(100)
    on_npu[:, 1].add_(100)
    assert torch.equal(on_npu.cpu(), on_cpu)
    out = torch.empty(3, 3, device=emulated_npu).t()
    torch.add(torch.ones(3, 3, device=emulated_npu), 1, out=out)
    assert out.stride() == (1, 3) and bool((out.cpu() == 2).all())


def test_conjugate_views_and_overlapping_copies_behave_as_on_the_cpu(emulated_npu):
    z = torch.randn(2, 2, dtype=torch.complex64)
    assert torch.equal(z.to(emulated_npu).conj().cpu(), z.conj())
    assert torch.equal((-z.to(emulated_npu).conj()).cpu(), -z.conj())
    y, y_cpu = torch.arange(5.0).to(emulated_npu), torch.arange(5.0)
    with pytest.raises(RuntimeError, match="unsupported operation: some elements"):
        y_cpu[1:].copy_(y_cpu[:-1])  # the oracle: the CPU refuses an overlapping copy
    with pytest.raises(RuntimeError, match="unsupported operation: some elements"):
        y[1:].copy_(y[:-1])


def test_what_the_emulator_cannot_run_is_said_to_be_the_emulators(emulated_npu):
    with torch.autocast(emulated_npu, dtype=torch.float16):  # runs; this device has no autocast kernels
        assert (torch.ones(2, device=emulated_npu) * 2).dtype == torch.float32
    lstm = torch.nn.LSTM(4, 3).to(emulated_npu)  # torch picks a fused cell CPU has no kernel for
    with pytest.raises(NotImplementedError, match="The emulated npu device cannot run aten::_thnn_fused_lstm_cell"):
        lstm(torch.randn(2, 1, 4, device=emulated_npu))


def test_autograd_on_the_device_matches_a_float64_cpu_golden(emulated_npu):
    g = torch.Generator().manual_seed(0)
    a64, b64 = torch.randn(5, 3, generator=g, dtype=torch.float64), torch.randn(3, 4, generator=g, dtype=torch.float64)
    a = a64.float().to(emulated_npu).requires_grad_()
    b = b64.float().to(emulated_npu).requires_grad_()
    (a.exp() @ b).tanh().sum().backward()
    a_ref, b_ref = a64.clone().requires_grad_(), b64.clone().requires_grad_()
    (a_ref.exp() @ b_ref).tanh().sum().backward()
    assert a.grad.device.type == "npu"
    torch.testing.assert_close(a.grad.cpu().double(), a_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(b.grad.cpu().double(), b_ref.grad, rtol=1e-5, atol=1e-5)


def test_torch_compile_aot_eager_runs_on_the_device_and_inductor_has_no_codegen(emulated_npu):
    from tracecheck import compat

    def f(x):
        return torch.nn.functional.gelu(x @ x.T).sum(dim=0)

    x = torch.randn(6, 6).to(emulated_npu)
    got = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    assert got.device.type == "npu"
    torch.testing.assert_close(got.cpu(), f(x.cpu()))
    assert compat.inductor_has_codegen("cpu") and not compat.inductor_has_codegen(emulated_npu)


def test_a_conv_net_trains_on_the_device_as_on_the_cpu(emulated_npu):
    """Convolutions reach a device outside CPU/CUDA as convolution_overrideable (whose default kernel raises): the
    emulator runs them on the host. Forward and parameter gradients equal the CPU's, BatchNorm in training mode."""
    import copy

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                              torch.nn.Conv2d(4, 2, 3, stride=2, bias=False), torch.nn.ConvTranspose2d(2, 1, 2)).train()
    x = torch.randn(2, 3, 8, 8)
    on_npu = copy.deepcopy(net).to(emulated_npu)
    ref = net(x)
    ref.square().sum().backward()
    got = on_npu(x.to(emulated_npu))
    got.square().sum().backward()
    torch.testing.assert_close(got.cpu(), ref)
    for (name, p), q in zip(net.named_parameters(), on_npu.parameters()):
        assert q.grad.device.type == "npu", name
        torch.testing.assert_close(q.grad.cpu(), p.grad, msg=name)


def test_a_cpu_tensor_where_a_device_tensor_is_expected_is_refused_as_on_a_real_device(emulated_npu):
    x, w = torch.randn(4, 4).to(emulated_npu), torch.randn(4, 3)
    for call in (lambda: x @ w, lambda: torch.nn.functional.linear(x, w.T), lambda: torch.cat([x, torch.ones(1, 4)])):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            call()
    assert (x * torch.tensor(2.0)).device.type == "npu"  # a CPU 0-dim tensor is a scalar: allowed, as on CUDA


def test_random_numbers_are_drawn_from_the_cpu_generator(emulated_npu):
    torch.manual_seed(3)
    on_device = torch.randn(4, device=emulated_npu)
    torch.manual_seed(3)
    assert torch.equal(on_device.cpu(), torch.randn(4))


def test_a_vendor_op_without_a_kernel_for_the_device_is_refused_not_run_on_the_host(emulated_npu):
    lib = torch.library.Library("tc_npu_test", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        x = torch.ones(3, device=emulated_npu)
        with pytest.raises(NotImplementedError, match=r"Could not run 'tc_npu_test::twice' with arguments from the "
                                                      r"'PrivateUse1' backend"):
            torch.ops.tc_npu_test.twice(x)
        torch.library.impl("tc_npu_test::twice", "PrivateUse1", lambda x: x * 2, lib=lib)  # the kind's fix
        torch.library.register_fake("tc_npu_test::twice", lambda x: torch.empty_like(x), lib=lib)
        assert torch.ops.tc_npu_test.twice(x).cpu().tolist() == [2.0, 2.0, 2.0]
        torch.library.opcheck(torch.ops.tc_npu_test.twice.default, (x,))
    finally:
        lib._destroy()


