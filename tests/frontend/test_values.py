"""Values as people read them (frontend/templatetags/values.py): rounded, with units, as words, in local time."""

from datetime import UTC, datetime, timedelta

import pytest
from django.test import RequestFactory
from django.utils import timezone, translation

from frontend.templatetags import values
from frontend.timezones import ReaderTimeZoneMiddleware


@pytest.fixture(autouse=True)
def english():
    with translation.override("en"):
        yield


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0 s"), (42.9, "42 s"), (185, "3 min 05 s"), (7500, "2 h 05 min"), (3 * 86400 + 4 * 3600 + 59, "3 d 4 h")],
)
def test_durations_have_units_and_two_parts_at_most(seconds, shown):
    assert values.duration(seconds) == shown
    assert values.duration(timedelta(seconds=seconds)) == shown


def test_no_duration_is_a_dash_not_an_error():
    assert values.duration(None) == values.duration("nonsense") == values.duration(float("nan")) == "—"


@pytest.mark.parametrize(
    ("gpu_seconds", "shown"),
    [
        (0, "0 GPU-hours"),
        (736.37, "0.205 GPU-hours"),  # 0.204547 GPU-hours, the example
        (185, "3.08 GPU-minutes"),
        (11.5, "0.192 GPU-minutes"),  # a short run: a fraction of a minute is plural too
        (60, "1 GPU-minute"),
        (3600, "1 GPU-hour"),
        (0.204547 * 3600 * 10, "2.05 GPU-hours"),
        (1234.4 * 3600, "1,234 GPU-hours"),
    ],
)
def test_gpu_hours_are_rounded_with_their_unit(gpu_seconds, shown):
    assert values.gpu_hours(gpu_seconds) == shown


def test_gpu_hours_given_in_hours():
    assert values.gpu_hours(0.5, "hours") == "0.5 GPU-hours"


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.97333336, "0.9733"), (1.0, "1"), (12.3456, "12.35"), (1234.5678, "1,235"), (1e-05, "1e-05"), (0, "0")],
)
def test_metrics_have_sensible_precision(value, shown):
    assert values.metric(value) == shown


def test_best_value_follows_the_metric_direction():
    assert values.best_index([0.5, 0.9, 0.7]) == 1
    assert values.best_index([0.5, 0.2, 0.7], "min") == 1
    assert values.lower_is_better("val_loss") and not values.lower_is_better("accuracy")
    assert values.best_index_for([0.5, 0.2, None, 0.7], "loss/train") == 1
    assert values.best_index_for([0.5, 0.2, None, 0.7], "accuracy/test") == 3
    assert values.best_index_for([None, "n/a"], "accuracy") is None


def test_statuses_and_reasons_are_words_translated():
    assert values.status_word("rolled_back") == "rolled back"
    assert values.status_word("some_new_state") == "some new state"
    assert values.reason_label("quota_exhausted") == "Quota used up"
    html = values.reason("quota_exhausted")
    assert 'title="quota_exhausted"' in html and ">Quota used up<" in html
    with translation.override("zh-hans"):
        assert values.status_word("running") != "running"


def test_times_are_shown_in_the_readers_zone():
    moment = datetime(2026, 12, 3, 14, 15, 57, 838211, tzinfo=UTC)
    seen = {}

    def view(request):
        seen["text"] = values.when(moment)
        return None

    request = RequestFactory().get("/", HTTP_COOKIE="portal_tz=Asia/Shanghai")
    ReaderTimeZoneMiddleware(view)(request)
    assert seen["text"] == "3 Dec 2026, 22:15" and "838211" not in seen["text"]
    assert timezone.get_current_timezone_name() == "UTC", "the zone must not leak past the request"

    ReaderTimeZoneMiddleware(view)(RequestFactory().get("/", HTTP_COOKIE="portal_tz=../../etc/passwd"))
    assert "14:15" in seen["text"]
