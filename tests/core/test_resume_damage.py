"""A resume that meets a damaged record line stops on it with the way out, instead of counting its key as done."""

from __future__ import annotations

from pathlib import Path

import pytest
from record_factory import make_record

from userturn.core.errors import UserError
from userturn.core.resume_index import scan_results
from userturn.judges.backlog import scan_judging


def damaged_files(tmp_path: Path) -> dict[str, Path]:
    """Line 2 of each file is damaged: cut short with another record glued on (a concatenation without a newline),
    cut short (the end zeroed), or a record whose end is not JSON."""
    one, two, three = (make_record(i).model_dump_json().encode() + b"\n" for i in (1, 2, 3))  # as the writer writes
    files = {"glued": one + two[:-40] + three, "cut": one + two[:-40] + b"\x00" * 39 + b"\n" + three,
             "garbled": one + two[:-3] + b"#}\n" + three}
    out = {}
    for name, data in files.items():
        out[name] = tmp_path / f"{name}.jsonl"
        out[name].write_bytes(data)
    return out


@pytest.mark.parametrize("name", ["glued", "cut", "garbled"])
def test_a_damaged_record_is_never_done_on_resume(tmp_path: Path, name: str) -> None:
    path = damaged_files(tmp_path)[name]
    with pytest.raises(UserError) as caught:
        scan_results(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:2: not a userturn record (")
    assert f"delete it (e.g. sed -i '2d' {path}) and rerun; the probe's rerun makes that record again" in message


def test_outside_the_careful_tail_a_record_cut_short_is_not_done(tmp_path: Path, monkeypatch) -> None:
    from userturn.core import resume_index

    monkeypatch.setattr(resume_index, "CAREFUL_TAIL_BYTES", 0)  # the whole file is read by the fast path
    with pytest.raises(UserError, match=r"cut\.jsonl:2: not a userturn record .* delete it"):
        scan_results(damaged_files(tmp_path)["cut"])


def test_the_judges_resume_names_a_damaged_output_line_and_the_way_out(tmp_path: Path) -> None:
    path = damaged_files(tmp_path)["glued"]
    with pytest.raises(UserError, match=r"glued\.jsonl:2: not a userturn record .* delete it \(e\.g\. sed -i '2d'"):
        scan_judging(path, lambda facts: "todo")


def middle_damaged(tmp_path: Path) -> Path:
    """Line 2's head and end are a record's, its middle is not JSON (a block overwritten: a quote gone)."""
    one, two, three = (make_record(i).model_dump_json().encode() + b"\n" for i in (1, 2, 3))
    middle = two.index(b'"user_turn"')
    path = tmp_path / "middle.jsonl"
    path.write_bytes(one + two[:middle] + two[middle + 1:] + three)
    return path


def test_a_record_damaged_in_its_middle_before_the_careful_tail_is_not_done(tmp_path: Path, monkeypatch) -> None:
    from userturn.core import resume_index

    monkeypatch.setattr(resume_index, "CAREFUL_TAIL_BYTES", 0)  # line 2 lies before the file's last 4 MiB
    path = middle_damaged(tmp_path)
    with pytest.raises(UserError, match=r"middle\.jsonl:2: not a userturn record .* delete it"):
        scan_results(path)


def test_every_reader_refuses_a_damaged_line_with_the_same_advice(tmp_path: Path, monkeypatch) -> None:
    from userturn.core import resume_index
    from userturn.core.jsonl import read_records
    from userturn.judges.run_judge import plan_input
    from userturn.report.scan import scan_files

    monkeypatch.setattr(resume_index, "CAREFUL_TAIL_BYTES", 0)
    path = middle_damaged(tmp_path)
    messages = []
    for read in (scan_results, read_records, scan_files, lambda p: scan_judging(p, lambda facts: "todo"),
                 lambda p: plan_input(p, scan_judging(tmp_path / "none.jsonl", lambda facts: "todo"))):
        with pytest.raises(UserError) as caught:
            read(path)
        message = str(caught.value)
        assert message.startswith(f"{path}:2: not a userturn record ("), message
        messages.append(message[message.index("; the line is damaged"):])  # why: each reader's own words
    assert len(set(messages)) == 1, messages
    assert messages[0].startswith(f"; the line is damaged: delete it (e.g. sed -i '2d' {path})")
