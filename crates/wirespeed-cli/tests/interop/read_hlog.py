#!/usr/bin/env python3
"""Read a wirespeed ping HdrHistogram log with the reference Python HdrHistogram package
(hdrhistogram on PyPI) and print the merged distribution as JSON."""
import sys, json
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
ref = HdrHistogram(1, 60_000_000_000, 3)
r = HistogramLogReader(sys.argv[1], ref)
total = HdrHistogram(1, 60_000_000_000, 3)
n = 0
while True:
    h = r.get_next_interval_histogram()
    if h is None:
        break
    total.add(h); n += 1
print(json.dumps({"intervals": n, "count": total.get_total_count(), "p50": total.get_value_at_percentile(50), "p99": total.get_value_at_percentile(99), "max": total.get_max_value(), "min": total.get_min_value()}))
