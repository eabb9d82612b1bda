"""Devices beyond torch's own that probes can run on: the emulated NPU (``emulated_npu``: the PrivateUse1 key
renamed ``npu``, on host memory). The real torch_npu's status is environment.npu_status."""
