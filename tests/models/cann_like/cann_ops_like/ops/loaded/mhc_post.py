import torch

from ...op_builder import OpBuilder


class MhcPostFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, h_res, h_out, h_post):
        op_module = mhc_post_op_builder.load()
        out = op_module.mhc_post(x, h_res, h_out, h_post)
        ctx.save_for_backward(x, h_res, h_out, h_post)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        x, h_res, h_out, h_post = ctx.saved_tensors
        op_module = mhc_post_op_builder.load()
        grad_x, grad_h_res, grad_h_out, grad_h_post = op_module.mhc_post_backward(grad_output, x, h_res, h_out,
                                                                                  h_post)
        return grad_x, grad_h_res, grad_h_out, grad_h_post


mhc_post_op_builder = OpBuilder("mhc_post")


def mhc_post(x, h_res, h_out, h_post):
    needs_grad = x.requires_grad or h_res.requires_grad or h_out.requires_grad or h_post.requires_grad
    if needs_grad:
        return MhcPostFunction.apply(x, h_res, h_out, h_post)
    op_module = mhc_post_op_builder.load()
    return op_module.mhc_post(x, h_res, h_out, h_post)
