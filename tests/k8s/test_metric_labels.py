"""No histogram of the operator's is labelled per model or per pod: a histogram is a series per bucket
plus its sum and count for each set of labels, so one per model and pod made tens of thousands of
series for one server of a fleet, and a pod's series stay behind it (its name changes at every roll)."""

from __future__ import annotations

from prometheus_client import Histogram

from triton_operator.k8s.process import metrics


def test_no_histogram_is_labelled_per_model_or_pod() -> None:
    histograms = {name: value for name, value in vars(metrics).items() if isinstance(value, Histogram)}
    assert "CONTROL_CALL_SECONDS" in histograms
    for name, histogram in histograms.items():
        assert not {"model", "pod"} & set(histogram._labelnames), name
