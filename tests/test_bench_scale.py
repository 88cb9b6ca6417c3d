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


@pytest.mark.parametrize("pinned, streams", [(True, 2), (True, 3), (False, 2)])
def test_out_of_core_rows(scale, pinned, streams):
    bandwidths = scale.copy_bandwidths()
    assert set(bandwidths) == {"h2d", "d2h", "duplex"}
    assert all(1e9 < b < 1e12 for b in bandwidths.values())
    row = scale.out_of_core_row(0.05, pinned, bandwidths, streams)
    assert row["bytes"] > 4e7 and row["seconds"] > 0 and row["streams"] == streams
    assert row["bandwidth_fraction"] > 0 and row["duplex_fraction"] > 0
