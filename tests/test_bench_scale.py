"""The scale suite's rows (kscupy.bench.scale) on small sizes, on a GPU."""
import pytest

from conftest import GPU_REASON, gpu_available

pytestmark = pytest.mark.gpu


@pytest.fixture
def scale():
    if not gpu_available():
        pytest.skip(GPU_REASON)
    from kscupy.bench import scale
    return scale


def test_fresh_copy_rows(scale):
    for name in scale.OPERATORS:
        row = scale.fresh_copy_row(name, 2000)
        assert row["suite"] == "fresh_copy" and row["first_s"] > 0 and row["warm_s"] > 0
        assert len(row["first_all_s"]) == scale.COPIES


@pytest.mark.parametrize("pinned", [True, False])
def test_out_of_core_rows(scale, pinned):
    bandwidth = scale.host_to_device_bandwidth()
    assert 1e9 < bandwidth < 1e12
    row = scale.out_of_core_row(0.05, pinned, bandwidth)
    assert row["bytes"] > 4e7 and row["seconds"] > 0 and row["bandwidth_fraction"] > 0
