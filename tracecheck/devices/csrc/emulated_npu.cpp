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
#include <ATen/native/Resize.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/alloc_cpu.h>

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

// A CPU tensor over the same memory (the device's memory is host memory).
at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  host_alias(dst).copy_(host_alias(self));
  return dst;
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat>) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const auto nbytes =
      at::detail::computeStorageNbytesContiguous(size, impl->dtype().itemsize(), impl->storage_offset());
  at::native::maybe_resize_storage_cpu(impl, nbytes);  // grows the storage with its own (this) allocator
  return self;
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

// torch's own operators run on the host (the emulated device's "kernels"). Any other namespace is a vendor's op
// without a PrivateUse1 kernel: it fails as the dispatcher says it on a real device, never silently on the host.
void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& name = op.schema().name();
  if (name.rfind("aten::", 0) == 0 || name.rfind("prims::", 0) == 0) {
    at::native::cpu_fallback(op, stack);
    return;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", name, "' with arguments from the 'PrivateUse1' backend. '",
                              name, "' has no kernel for PrivateUse1 (on the emulated npu device only aten and prims "
                              "operators run on the host).");
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
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.doc() = "tracecheck's emulated NPU (PrivateUse1 on host memory)"; }
