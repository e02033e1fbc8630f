"""Device clock offset/drift from stamps with random one-sided delays: against the known truth."""
import numpy as np
import pytest

from daq.clock import ClockSync

S = 1_000_000_000


def stamps(seconds, rate_hz=200.0, drift=50e-6, offset_ns=3_200_000_000, min_delay_ns=100_000,
           mean_extra_ns=2_000_000, seed=0):
    """Device stamps and host arrival stamps of a device clock with the given drift and offset.

    Truth: host = device + offset + drift * device + delay, delay = min + Exp(mean_extra).
    """
    rng = np.random.default_rng(seed)
    t_dev = 10**15 + np.arange(int(seconds * rate_hz), dtype=np.int64) * int(S / rate_hz)
    true_host = t_dev + offset_ns + np.rint(drift * (t_dev - t_dev[0])).astype(np.int64)
    delay = min_delay_ns + rng.exponential(mean_extra_ns, t_dev.size).astype(np.int64)
    return t_dev, true_host, true_host + delay


def test_offset_and_drift_recovered_under_one_sided_jitter():
    t_dev, true_host, t_arr = stamps(120)
    sync = ClockSync(bin_s=1.0, half_life_s=30.0)
    sync.update_many(t_dev, t_arr)
    est = sync.estimate()
    assert est.drift == pytest.approx(50e-6, abs=1e-6)
    # the mapping is the truth plus the minimum transport delay (100 us), within 50 us,
    # while the raw arrival stamps are off by 2 ms on average
    err = sync.to_lab(t_dev[-2000:]) - true_host[-2000:]
    assert np.all(np.abs(err - 100_000) < 50_000)
    assert np.mean(t_arr[-2000:] - true_host[-2000:]) > 1_500_000


def test_outliers_above_the_envelope_do_not_move_it():
    t_dev, true_host, t_arr = stamps(60, drift=-20e-6)
    t_arr = t_arr.copy()
    t_arr[::7] += 50_000_000  # every 7th sample held up by 50 ms (a stalled reader)
    sync = ClockSync()
    sync.update_many(t_dev, t_arr)
    assert sync.estimate().drift == pytest.approx(-20e-6, abs=2e-6)
    assert abs(int(sync.to_lab(int(t_dev[-1]))) - int(true_host[-1]) - 100_000) < 60_000


def test_forgetting_follows_a_drift_change():
    """The device clock changes rate (temperature) after 60 s; the fit follows within a few half-lives."""
    t1, h1, a1 = stamps(60, drift=30e-6, seed=1)
    sync = ClockSync(half_life_s=10.0)
    sync.update_many(t1, a1)
    t2 = t1[-1] + np.arange(1, 120 * 200 + 1, dtype=np.int64) * 5_000_000
    h2 = h1[-1] + (t2 - t1[-1]) + np.rint(-10e-6 * (t2 - t1[-1])).astype(np.int64)
    a2 = h2 + 100_000 + np.random.default_rng(2).exponential(2_000_000, t2.size).astype(np.int64)
    sync.update_many(t2, a2)
    assert sync.estimate().drift == pytest.approx(-10e-6, abs=2e-6)


def test_start_up_and_errors():
    sync = ClockSync()
    assert sync.estimate() is None
    with pytest.raises(ValueError, match="no stamps"):
        sync.to_lab(0)
    sync.update(5 * S, 9 * S + 300)
    sync.update(5 * S + 1000, 9 * S + 1000 + 200)
    est = sync.estimate()
    assert (est.offset_ns, est.drift) == (4 * S + 200, 0.0)  # smallest delay seen, no drift yet
    assert sync.to_lab(6 * S) == 10 * S + 200
    with pytest.raises(ValueError, match="bin_s"):
        ClockSync(bin_s=0)
    with pytest.raises(ValueError, match="1-D"):
        sync.update_many(np.zeros(3), np.zeros(4))


def online_errors(t_dev, true_host, t_arr, sync, start):
    """Error [ns] of the corrected time of each sample from index `start` on, as a daemon computes it
    (the estimate after that sample's own update), against the true host time of the sample."""
    err = []
    for i, (td, ta) in enumerate(zip(t_dev.tolist(), t_arr.tolist())):
        sync.update(td, ta)
        if i >= start:
            err.append(int(sync.to_lab(td)) - int(true_host[i]))
    return np.array(err)


@pytest.mark.parametrize("drift", [100e-6, -100e-6])
def test_within_0_2_ms_of_truth_after_10_s(drift):
    """Offset, +-100 ppm drift and 2 ms mean one-sided jitter: after 10 s every corrected time is
    within 0.2 ms of the truth (which includes the minimum transport delay, 0.1 ms here)."""
    t_dev, true_host, t_arr = stamps(20, drift=drift, seed=3)
    sync = ClockSync()
    err = online_errors(t_dev, true_host, t_arr, sync, start=10 * 200)
    assert np.max(np.abs(err)) < 200_000
    assert sync.resets == 0


@pytest.mark.parametrize("jump_s", [-3.0, +7.0])
def test_a_reset_is_re_anchored_not_averaged_in(jump_s):
    """The device clock restarts (back to an earlier value, or forward) at 15 s: the fit starts over
    from the reset, so 10 s later it is again within 0.2 ms; averaging the two clocks would be off by
    the jump (seconds)."""
    t_dev, true_host, t_arr = stamps(30, drift=80e-6, seed=4)
    k = 15 * 200
    t_dev = t_dev.copy()
    t_dev[k:] += int(jump_s * S)  # same samples, same arrivals: only the device clock jumped
    sync = ClockSync()
    online_errors(t_dev[:k], true_host[:k], t_arr[:k], sync, start=k)
    after = online_errors(t_dev[k:], true_host[k:], t_arr[k:], sync, start=0)
    assert sync.resets == 1 and "device clock" in sync.last_reset
    assert np.max(np.abs(after[10 * 200:])) < 200_000
    assert np.max(np.abs(after[:200])) < 20_000_000  # right after the reset: the new anchor's delay only


def test_a_stall_is_not_a_reset():
    """Arrivals held up by 0.5 s for 1 s (a stalled reader), then back: no reset, the envelope holds."""
    t_dev, true_host, t_arr = stamps(20, seed=5)
    t_arr = t_arr.copy()
    t_arr[5 * 200:6 * 200] += 500_000_000
    sync = ClockSync()
    err = online_errors(t_dev, true_host, t_arr, sync, start=12 * 200)
    assert sync.resets == 0 and sync.late_windows >= 1 and np.max(np.abs(err)) < 200_000
