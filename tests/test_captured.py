"""kscupy.core.captured driven on the CPU with stand-ins for CuPy and PyTorch: which
allocator a product's memory comes from while a stream captures a CUDA graph, and that the
blocks of CuPy captures are held until released. (The GPU behaviour, replays that leave
later arrays alone, is tests/test_graphs.py's.)"""
import contextlib
import sys
import threading
import types

import pytest

from kscupy.core import captured


class _StandIns:
    """A CuPy and a PyTorch whose current streams capture or not, as set."""

    def __init__(self):
        self.cupy_capturing = self.torch_capturing = False
        self.allocators = []            # the allocator of each using_allocator, entered
        self.torch_blocks = []
        stream = types.SimpleNamespace(is_capturing=lambda: self.cupy_capturing)
        cuda = types.SimpleNamespace(
            get_current_stream=lambda: stream,
            get_allocator=lambda: (lambda size: ("cupy block", size)),
            using_allocator=self._using,
            runtime=types.SimpleNamespace(getDevice=lambda: 0),
            UnownedMemory=lambda ptr, size, owner, device: ("unowned", ptr, size, owner),
            MemoryPointer=lambda memory, offset: ("pointer", memory))
        self.cupy = types.SimpleNamespace(cuda=cuda)
        self.torch = types.SimpleNamespace(
            uint8="uint8",
            cuda=types.SimpleNamespace(is_current_stream_capturing=lambda: self.torch_capturing),
            empty=self._torch_empty)

    @contextlib.contextmanager
    def _using(self, malloc):
        self.allocators.append(malloc)
        yield

    def _torch_empty(self, size, dtype, device):
        address = 4096 * (len(self.torch_blocks) + 1)
        block = types.SimpleNamespace(data_ptr=lambda: address, size=size, device=device)
        self.torch_blocks.append(block)
        return block


@pytest.fixture
def stand_ins(monkeypatch):
    made = _StandIns()
    monkeypatch.setitem(sys.modules, "cupy", made.cupy)
    monkeypatch.setitem(sys.modules, "torch", made.torch)
    captured.release_captured_memory()
    yield made
    captured.release_captured_memory()


def test_outside_a_capture_nothing_changes(stand_ins):
    cupy = stand_ins.cupy
    with captured.memory(cupy), captured.memory(cupy, torch_stream=True):
        pass
    assert stand_ins.allocators == []
    stand_ins.cupy_capturing = stand_ins.torch_capturing = True
    import numpy
    with captured.memory(numpy), captured.memory(numpy, torch_stream=True):    # NumPy
        pass
    assert stand_ins.allocators == []


def test_in_a_cupy_capture_blocks_are_held_until_released(stand_ins):
    stand_ins.cupy_capturing = True
    with captured.memory(stand_ins.cupy):
        with captured.memory(stand_ins.cupy):  # nested: the outer allocator stays
            pass
    assert len(stand_ins.allocators) == 1
    malloc = stand_ins.allocators[0]
    assert malloc(512) == ("cupy block", 512) and malloc(64) == ("cupy block", 64)
    assert captured.held_blocks() == 2
    captured.release_captured_memory()
    assert captured.held_blocks() == 0


def test_in_a_pytorch_capture_memory_comes_from_pytorch(stand_ins):
    stand_ins.torch_capturing = True
    with captured.memory(stand_ins.cupy, torch_stream=True):
        with captured.memory(stand_ins.cupy):  # a product inside the tensor's product
            pass
    assert len(stand_ins.allocators) == 1
    pointer = stand_ins.allocators[0](1000)
    block = stand_ins.torch_blocks[0]
    assert block.size == 1000 and block.device == "cuda:0"
    assert pointer == ("pointer", ("unowned", 4096, 1000, block))    # the view keeps it
    assert captured.held_blocks() == 0          # PyTorch's graph pool keeps it, not kscupy
    # a product that is not a tensor's does not ask PyTorch
    stand_ins.allocators.clear()
    with captured.memory(stand_ins.cupy):
        pass
    assert stand_ins.allocators == []


def test_the_capture_allocator_ends_with_its_context_even_on_an_error(stand_ins):
    stand_ins.cupy_capturing = True
    with pytest.raises(ZeroDivisionError):
        with captured.memory(stand_ins.cupy):
            1 / 0
    with captured.memory(stand_ins.cupy):  # not taken for a nested use
        pass
    assert len(stand_ins.allocators) == 2


def test_another_threads_capture_allocator_is_not_this_ones(stand_ins):
    """The nesting mark is per thread: a product on another thread while one thread's
    capture allocator is in effect gets its own."""
    stand_ins.cupy_capturing = True
    entered, release = threading.Event(), threading.Event()

    def capture():
        with captured.memory(stand_ins.cupy):
            entered.set()
            release.wait(10)
    thread = threading.Thread(target=capture)
    thread.start()
    entered.wait(10)
    with captured.memory(stand_ins.cupy):
        pass
    release.set()
    thread.join()
    assert len(stand_ins.allocators) == 2


def test_new_values_inside_a_capture_are_refused_with_the_fix(stand_ins):
    import numpy
    captured.refuse_in_capture(numpy, "KSMatrix(values)")             # NumPy: nothing
    captured.refuse_in_capture(stand_ins.cupy, "KSMatrix(values)")    # not capturing
    stand_ins.cupy_capturing = True
    with pytest.raises(RuntimeError, match="KSMatrix.values. while the current stream "
                                           "captures a CUDA graph.*before capturing"):
        captured.refuse_in_capture(stand_ins.cupy, "KSMatrix(values)")
