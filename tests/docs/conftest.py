"""At the end of a run that collected the docs' block tests: the blocks this lane did not run, each with why."""

from doc_blocks import blocks, pages

_collected = []


def pytest_collection_modifyitems(items):
    _collected.extend(item for item in items if "tests/docs/" in item.nodeid)


def pytest_terminal_summary(terminalreporter):
    if not _collected:
        return
    listed = [(b.where, b.needs, b.reason) for page in pages() for b in blocks(page)
              if b.marker and not b.is_output]
    terminalreporter.section(f"doc blocks not run in this lane ({len(listed)})")
    for where, needs, reason in listed:
        label = "not run" if needs == "not run" else f"needs {needs}"
        terminalreporter.write_line(f"{where}: {label}{': ' + reason if reason else ''}")
