"""The search page's slots chart: which trial ran on which slot when, idle time left blank."""

from hopsml.ui.views import GANTT_WIDTH, slot_gantt


def _row(index, *placements, state="FINISHED"):
    return {"label": f"x={index}", "index": index, "state": state, "placements": list(placements)}


def test_jobs_with_a_slot_keep_it_and_the_others_take_the_first_lane_free_at_their_start():
    rows = [_row(0, {"slot": 1, "host": "a", "start": 100.0, "end": 102.0}),
            _row(1, {"slot": 0, "host": "a", "start": 100.0, "end": 101.0},
                 {"slot": 0, "host": "a", "start": 103.0, "end": 104.0}),   # a promoted trial's second job
            _row(2, {"host": "b", "start": 100.0, "end": 101.0}), _row(3, {"host": "b", "start": 100.5, "end": 102.0}),
            _row(4, {"host": "b", "start": 101.0, "end": 104.0}, state="FAILED"),
            _row(5, {"host": "b", "start": "bad", "end": 1}), _row(6)]
    gantt = slot_gantt(rows)
    lanes = {lane["name"]: [(b["index"], b["start"], b["end"]) for b in lane["bars"]] for lane in gantt["lanes"]}
    assert lanes == {"a slot 0": [(1, 0.0, 1.0), (1, 3.0, 4.0)], "a slot 1": [(0, 0.0, 2.0)],
                     "b slot 0": [(2, 0.0, 1.0), (4, 1.0, 4.0)], "b slot 1": [(3, 0.5, 2.0)]}
    assert gantt["seconds"] == 4.0 and gantt["busy"] == round(9.5 / (4 * 4.0), 3)   # idle time counts against
    last = gantt["lanes"][2]["bars"][1]
    assert (last["x"], last["w"], last["state"]) == (GANTT_WIDTH / 4, 3 * GANTT_WIDTH / 4, "FAILED")


def test_a_search_without_placements_has_no_chart():
    assert slot_gantt([_row(0), _row(1, "not a dict")]) is None
