"""How a training batch reaches its device (`bench.training.loop._onto`): on the CPU the very
tensor the batcher made, so CPU runs are unchanged to the bit; on CUDA the same values, copied
from pinned memory without the host waiting."""

import pytest
import torch

from bench.data import train_batches
from bench.training.loop import _onto


def a_batch() -> tuple[torch.Tensor, torch.Tensor]:
    _, x, y, _ = next(train_batches(torch.arange(400).numpy() % 7, 4, 16))
    return x, y


def test_on_the_cpu_a_batch_is_the_tensor_the_batcher_made():
    x, y = a_batch()
    onto = _onto(torch.device("cpu"))
    assert onto(x) is x and onto(y) is y


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_batch_arrives_whole_from_pinned_memory():
    x, y = a_batch()
    onto = _onto(torch.device("cuda"))
    gx, gy = onto(x), onto(y)
    assert gx.is_cuda and gy.is_cuda
    assert torch.equal(gx.cpu(), x) and torch.equal(gy.cpu(), y)  # .cpu() waits for the copy
