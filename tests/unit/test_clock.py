from fleetwatch.ingest.clock import ClockOffsets


def test_one_sample_is_already_an_estimate() -> None:
    assert ClockOffsets().observe("d1", sent_ms=1_000, received_ms=1_250) == 250


def test_the_median_ignores_a_slow_delivery() -> None:
    clocks = ClockOffsets(window=5)
    for delay in (100, 102, 99, 101):
        clocks.observe("d1", 0, delay)
    assert clocks.observe("d1", 0, 60_000) == 101  # one reading flushed from a buffer


def test_the_window_forgets_old_samples_so_a_clock_change_is_followed() -> None:
    clocks = ClockOffsets(window=3)
    for _ in range(3):
        clocks.observe("d1", 0, 100)
    for _ in range(2):
        last = clocks.observe("d1", 0, 5_000)  # the device's clock was reset
    assert last == 5_000


def test_devices_are_independent_and_the_oldest_is_forgotten_at_the_limit() -> None:
    clocks = ClockOffsets(max_devices=2)
    clocks.observe("a", 0, 1)
    clocks.observe("b", 0, 2)
    clocks.observe("c", 0, 3)
    assert (clocks.offset("a"), clocks.offset("b"), clocks.offset("c")) == (None, 2, 3)
