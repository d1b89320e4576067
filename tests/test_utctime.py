"""One UTC time format (forgepatch.utctime): what it writes, it reads back exactly."""

from datetime import datetime, timedelta, timezone

from hypothesis import given, strategies as st

from forgepatch import utctime

aware = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2999, 12, 31),
                     timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=5, minutes=30)),
                                                timezone(timedelta(hours=-8))]))


@given(aware)
def test_iso_reads_back_to_the_same_instant(when):
    text = utctime.iso(when)
    assert text.endswith("Z") and len(text) == len("2026-12-02T04:31:05.123456Z")
    assert utctime.parse(text) == when


@given(aware)
def test_seconds_and_compact_forms_are_the_instant_truncated(when):
    truncated = when.astimezone(timezone.utc).replace(microsecond=0)
    assert utctime.parse(utctime.iso_seconds(when)) == truncated
    assert utctime.compact(when) == truncated.strftime("%Y%m%dT%H%M%SZ")


def test_docker_created_nanoseconds_and_garbage():
    assert utctime.parse("2026-11-29T20:26:41.123456789Z") == datetime(2026, 11, 29, 20, 26, 41, 123456, timezone.utc)
    assert utctime.parse("2026-11-29T20:26:41+02:00") == datetime(2026, 11, 29, 18, 26, 41, tzinfo=timezone.utc)
    for bad in ("", "yesterday", "2026-13-40T99:99:99Z", None, 7):
        assert utctime.parse(bad) is None
