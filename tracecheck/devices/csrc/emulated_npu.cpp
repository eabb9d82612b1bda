// An emulated NPU: the PrivateUse1 dispatch key backed by host memory, so that vendor op registrations
// (TORCH_LIBRARY_IMPL(ns, PrivateUse1, m), as torch_npu ships them) run on a machine without the device.
//
// What a C++ backend needs (the shape of PyTorch's open-registration test backend): an allocator for the
// device, the factory, copy, resize and view kernels, and a boxed fallback for every other aten op. Storage
// is real (host) memory tagged with the device, so views alias, strides are the real ones and in-place ops
// reach their base. The fallback is ATen's own cpu_fallback: it runs the CPU kernel and copies results back.
// Device guard, hooks and the `torch.npu` module are registered from Python (tracecheck/devices/emulated_npu.py).
#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/resize_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <unordered_set>

namespace {

void free_host(void* ptr) { c10::free_cpu(ptr); }

struct HostMemoryAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    return {data, data, &free_host, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_host; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { default_copy_data(dest, src, count); }
};

HostMemoryAllocator allocator;

c10::DispatchKeySet device_keys() { return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1); }

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>,
                               std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &allocator, device_keys(), c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &allocator, device_keys(), c10::dtype_or_default(dtype));
}

// A CPU tensor over the same memory (the device's memory is host memory), with the lazy conjugate/negative bits
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().is_cpu()) return t;
  auto h = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  h._set_conj(t.is_conj());
  h._set_neg(t.is_neg());
  return h;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  // the host aliases have storages of their own: torch's overlap checks must see the device tensors
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, self);
  host_alias(dst).copy_(host_alias(self));
  return dst;
}

// torch's CPU resize_: the same size returns early (strides kept), memory_format is honoured, and a larger storage
// comes from the storage's own allocator (this device's)
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> format) {
  return at::native::resize_(self, size, format);
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) { return at::native::set_(self, source); }

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                               c10::SymIntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

std::unordered_set<std::string> host_namespaces = {"aten", "prims"};

void set_host_namespaces(const std::vector<std::string>& names) {
  host_namespaces = std::unordered_set<std::string>(names.begin(), names.end());
}

bool on_device(const c10::IValue& v) {
  return v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_privateuseone();
}

// A real device refuses a tensor of another device where one of its own is expected (a CPU 0-dim tensor is a
// scalar and allowed); cpu_fallback would move it silently. Copies and index tensors may cross devices.
void check_same_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  static const std::unordered_set<std::string> crossing = {
      "aten::copy_", "aten::_to_copy", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::index.Tensor",
      "aten::index_put_", "aten::index_put", "aten::_index_put_impl_", "aten::set_"};
  if (crossing.count(op.schema().name() + (op.schema().overload_name().empty() ? "" : "." + op.schema().overload_name())) ||
      crossing.count(op.schema().name()))
    return;
  const auto n = op.schema().arguments().size();
  bool device = false;
  std::optional<c10::Device> other;
  auto check = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.device().is_privateuseone()) device = true;
    else if (!(t.device().is_cpu() && t.dim() == 0) && !t.device().is_meta()) other = t.device();
  };
  for (auto it = stack.end() - n; it != stack.end(); ++it) {
    if (it->isTensor()) check(it->toTensor());
    else if (it->isTensorList()) for (const at::Tensor& t : it->toTensorList().vec()) check(t);
  }
  TORCH_CHECK(!(device && other), "Expected all tensors to be on the same device, but found at least two devices, npu:0 and ",
              other ? other->str() : "", "!");
}

// torch's own operators run on the host (the emulated device's "kernels"). Any other namespace is a vendor's op
// without a PrivateUse1 kernel: it fails as the dispatcher says it on a real device, never silently on the host.
// An op torch's CPU backend lacks (a CUDA-only kernel torch chose for a non-CPU device) is the emulator's gap, said so.
void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().name();
  const auto ns = name.substr(0, name.find("::"));
  TORCH_CHECK_NOT_IMPLEMENTED(host_namespaces.count(ns), "Could not run '", name,
                              "' with arguments from the 'PrivateUse1' backend. '", name,
                              "' has no kernel for PrivateUse1 (on the emulated npu device only torch's own operators "
                              "run on the host).");
  check_same_device(op, *stack);
  try {
    at::native::cpu_fallback(op, stack);
  } catch (const c10::NotImplementedError& e) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "The emulated npu device cannot run ", name, " on the host (tracecheck's "
                                "emulator, not the model): ", e.what_without_backtrace());
  }
}

// Convolutions reach a device outside CPU/CUDA as convolution_overrideable / convolution_backward_overrideable, whose
// default kernels raise: they run as aten::convolution / convolution_backward on host copies instead.
void call_on_host(const char* name, const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t insert_none_at) {
  const auto n = op.schema().arguments().size();
  check_same_device(op, *stack);
  for (auto it = stack->end() - n; it != stack->end(); ++it)
    if (on_device(*it)) *it = it->toTensor().cpu();
  if (insert_none_at) stack->insert(stack->end() - n + insert_none_at, c10::IValue());
  c10::Dispatcher::singleton().findSchemaOrThrow(name, "").callBoxed(stack);
  for (auto& v : *stack)
    if (v.isTensor() && v.toTensor().defined()) v = v.toTensor().to(c10::Device(c10::DeviceType::PrivateUse1, 0));
}

void convolution_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  call_on_host("aten::convolution", op, stack, 0);
}

// convolution_backward takes bias_sizes (None here) after weight; the overrideable one does not
void convolution_backward_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  call_on_host("aten::convolution_backward", op, stack, 3);
}

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize_);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("set_.source_Storage", set_storage);
  m.impl("set_.source_Storage_storage_offset", set_storage_offset);
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution_on_host>());
  m.impl("convolution_backward_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution_backward_on_host>());
}

// The conjugate/negative fallbacks would materialise through a copy, which calls _copy_from again: the copy kernel
// reads the bits itself (host_alias)
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

// torch.autocast("npu") runs (no op is cast: torch_npu registers its own autocast kernels, this device none)
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "tracecheck's emulated NPU (PrivateUse1 on CPU memory)";
  m.def("set_host_namespaces", &set_host_namespaces, "the operator namespaces run on the host (torch's own)");
}
