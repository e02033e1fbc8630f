"""The `kernel_path` fixture: a test module that uses it (``pytestmark =
pytest.mark.usefixtures("kernel_path")``) runs each test on the compiled kernels and again on the
numpy reference path (dynamics.kernels.use_jit)."""
import pytest

from dynamics import kernels


@pytest.fixture(params=["compiled", "numpy"])
def kernel_path(request):
    with kernels.use_jit(request.param == "compiled"):
        yield request.param
