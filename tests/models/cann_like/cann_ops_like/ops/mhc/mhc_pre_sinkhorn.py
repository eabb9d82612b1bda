"""The CANN wrapper's shape: an autograd.Function whose forward and backward call the pybind11 module, and a
public function that takes it when a gradient is needed and calls the module directly otherwise."""
import torch

from mhc.builder import MhcOpBuilder

ext = MhcOpBuilder().load()


class MhcPreSinkhornFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps):
        h_in, h_post, h_res, h_pre, hc_before_norm, inv_rms, sum_out, norm_out = ext.mhc_pre_sinkhorn(
            x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, True)
        ctx.save_for_backward(x, phi, alpha, bias, h_pre, hc_before_norm, inv_rms, sum_out, norm_out)
        ctx.hc_eps = hc_eps
        return h_in, h_post, h_res

    @staticmethod
    def backward(ctx, grad_h_in, grad_h_post, grad_h_res):
        grad_x, grad_phi, grad_alpha, grad_bias = ext.mhc_pre_sinkhorn_backward(
            grad_h_in, grad_h_post, grad_h_res, *ctx.saved_tensors, ctx.hc_eps)
        return grad_x, grad_phi, grad_alpha, grad_bias, None, None, None, None


def mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult=4, num_iters=20, hc_eps=1e-6, norm_eps=1e-6):
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, phi, alpha, bias)):
        return MhcPreSinkhornFunction.apply(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps)
    outs = ext.mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, False)
    return outs[0], outs[1], outs[2]
