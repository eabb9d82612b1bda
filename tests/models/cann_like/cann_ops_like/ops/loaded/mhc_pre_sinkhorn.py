import torch

from ...op_builder import OpBuilder


class MhcPreSinkhornFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps):
        op_module = mhc_pre_sinkhorn_op_builder.load()
        h_in, h_post, h_res, h_pre, hc_before_norm, inv_rms, sum_out, norm_out = op_module.mhc_pre_sinkhorn(
            x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, True)
        ctx.save_for_backward(x, phi, alpha, bias, h_pre, hc_before_norm, inv_rms, sum_out, norm_out)
        ctx.hc_eps = hc_eps
        return h_in, h_post, h_res

    @staticmethod
    def backward(ctx, grad_h_in, grad_h_post, grad_h_res):
        op_module = mhc_pre_sinkhorn_op_builder.load()
        grad_x, grad_phi, grad_alpha, grad_bias = op_module.mhc_pre_sinkhorn_backward(
            grad_h_in, grad_h_post, grad_h_res, *ctx.saved_tensors, ctx.hc_eps)
        return grad_x, grad_phi, grad_alpha, grad_bias, None, None, None, None


mhc_pre_sinkhorn_op_builder = OpBuilder("mhc_pre_sinkhorn")


def mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult=4, num_iters=20, hc_eps=1e-6, norm_eps=1e-6):
    if torch.is_grad_enabled() and any(t.requires_grad for t in (x, phi, alpha, bias)):
        return MhcPreSinkhornFunction.apply(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps)
    op_module = mhc_pre_sinkhorn_op_builder.load()
    outs = op_module.mhc_pre_sinkhorn(x, phi, alpha, bias, hc_mult, num_iters, hc_eps, norm_eps, False)
    return outs[0], outs[1], outs[2]
