"""The chaos run (chaos.py) on a real supervised server, and what must hold after it."""

import chaos


def test_under_chaos_no_request_is_lost_and_the_poison_is_quarantined(tmp_path):
    figures = chaos.run(str(tmp_path), seconds=90)
    assert figures["lost"] == 0, figures["lost_requests"]
    # Every kind of work ran, through the crashes.
    assert figures["requests"] > 1000, figures
    assert figures["training_cycles"] >= 2 and figures["load_unload_cycles"] >= 5, figures
    assert figures["scrapes"] >= 20, figures
    # Two poison requests crashed the serving process; the third found crashy quarantined.
    assert figures["restarts"] == 2, figures
    assert figures["poison"][2].startswith("UNAVAILABLE") and "quarantined" in \
        figures["poison"][2], figures["poison"]
    assert figures["poison_quarantined"], figures
    # The quiet RSS before and after, across restarts: a leak grows it run after run;
    # allocator and page-cache noise moves it about 6% either way on this machine
    # (-6.15% in a bench run, +6.16% in a clean make test of 2026-12-06).
    assert abs(figures["rss_change_pct"]) <= 10, figures
    assert figures["exit_status"] == 0
