"""daq.devices.world_sim's arguments: every bad value is one line naming the option (the process then exits
2 and is not restarted). The world process itself runs in tests/controller/test_run_sim.py."""
import pytest

from daq.devices.world_sim import parse_args


@pytest.mark.parametrize("args, words", [
    (["--control-hz", "300"], "--control-hz 300: expected a divisor of 1000000"),
    (["--stiffness", "0"], "--stiffness 0.0: expected > 0"),
    (["--mu", "-0.1"], "--mu -0.1: expected >= 0"),
    (["--dropout", "1.5"], "--dropout 1.5: expected 0 <= p < 1"),
    (["--marker-stream", "walker"], "marker streams are named markers/NAME"),
    (["--plate-noise-n", "nan"], "--plate-noise-n nan: expected >= 0"),
])
def test_bad_arguments_are_one_line(args, words):
    with pytest.raises(ValueError) as err:
        parse_args("world", args)
    assert words in str(err.value) and "\n" not in str(err.value) and "process 'world'" in str(err.value)

