"""A public training script that nobody here wrote, run as a command trainer: PyTorch's word_language_model
(pytorch/examples, vendored unchanged in tests/fixtures/public/word_language_model/). Its grid file is read as
ablate reads it, one run's command is rendered from it, run in its process group and parsed as it prints;
every stored value equals the number in the line the script printed, read back by hand."""

from __future__ import annotations

import sys
from pathlib import Path

from ablate.trainers.command.grid import CommandRun, expand_command_grid, load_command_grid
from ablate.trainers.command.parse import MetricsReader
from ablate.trainers.command.process import run
from ablate.trainers.command.render import RunValues, render

FOLDER = Path(__file__).resolve().parents[2] / "fixtures" / "public" / "word_language_model"
GRID = load_command_grid(FOLDER / "grid.yaml")


def files_under(folder: Path) -> set[Path]:
    return {p.relative_to(folder) for p in folder.rglob("*")}


def printed_numbers(lines: list[str]) -> tuple[list[tuple[int, float, float]], tuple[float, float]]:
    """Read back by hand: ``(epoch, valid loss, valid ppl)`` of each end-of-epoch line, and ``(test loss, test
    ppl)`` of the last line: ``| end of epoch   1 | time:  0.03s | valid loss  5.45 | valid ppl   232.18``."""
    epochs, test = [], None
    for line in lines:
        cells = [cell.strip() for cell in line.strip("| ").split("|")]
        if cells[0].startswith("end of epoch"):
            epoch, loss, ppl = cells[0].split()[-1], cells[2].split()[-1], cells[3].split()[-1]
            epochs.append((int(epoch), float(loss), float(ppl)))
        elif cells[0] == "End of training":
            test = float(cells[1].split()[-1]), float(cells[2].split()[-1])
    assert test is not None, lines
    return epochs, test


def train(one: CommandRun, runs_dir: Path) -> tuple[list[str], MetricsReader]:
    """Run ``one`` as ablate does; every line it printed, and the reader its stdout went to."""
    run_dir = runs_dir / one.run_id
    run_dir.mkdir(parents=True)  # main.py writes --save={run_dir}/model.pt and creates no folder
    inv = render(GRID.spec, GRID.folder, RunValues(one.run_id, run_dir, one.seed, one.params))
    assert inv.argv[0] == "python"  # as the grid file says; here, this interpreter
    printed: list[str] = []
    reader = MetricsReader(GRID.spec, inv.metrics_file)

    def both(line: str) -> None:
        printed.append(line)
        reader.stdout_line(line)

    outcome = run((sys.executable, *inv.argv[1:]), cwd=inv.cwd, env=inv.env, on_stdout=both,
                  every=reader.poll)
    assert outcome.ok and outcome.exit_code == 0, (outcome, printed)
    assert (run_dir / "model.pt").is_file()
    return printed, reader


def test_the_grid_is_two_arms_by_three_seeds_of_the_scripts_own_flags(tmp_path: Path) -> None:
    expanded = expand_command_grid(GRID)
    assert [(r.arm, r.seed) for r in expanded] == [(arm, seed) for arm in ("baseline", "gru")
                                                   for seed in (0, 1, 2)]
    inv = render(GRID.spec, GRID.folder, RunValues("r1", tmp_path / "r1", 2, expanded[3].params))
    assert inv.argv == ("python", "main.py", "--data=corpus", f"--save={tmp_path}/r1/model.pt", "--model=GRU",
                        "--emsize=16", "--nhid=16", "--nlayers=1", "--dropout=0.0", "--lr=5.0", "--epochs=4",
                        "--batch_size=2", "--bptt=8", "--seed=2")  # tied: false is left out (bools: flag)
    assert inv.cwd.resolve() == FOLDER


def test_each_stored_value_is_the_number_the_script_printed(tmp_path: Path) -> None:
    baseline = [r for r in expand_command_grid(GRID) if r.arm == "baseline"]
    before = files_under(FOLDER)
    losses = []
    for one in baseline[:2]:
        printed, reader = train(one, tmp_path / "runs")
        epochs, (test_loss, test_ppl) = printed_numbers(printed)
        assert [e for e, _, _ in epochs] == [1, 2, 3, 4]  # --epochs=4
        assert reader.stream.series == {"val_loss": [(e, loss) for e, loss, _ in epochs],
                                        "val_ppl": [(e, ppl) for e, _, ppl in epochs],
                                        "test_loss": [(None, test_loss)], "test_ppl": [(None, test_ppl)]}
        assert reader.summary() == {"val_loss": min(loss for _, loss, _ in epochs),  # summary: min
                                    "val_ppl": min(ppl for _, _, ppl in epochs),
                                    "test_loss": test_loss, "test_ppl": test_ppl}
        assert reader.failure() is None
        losses.append(reader.summary()["val_loss"])
    assert losses[0] != losses[1]  # seeds 0 and 1 train differently
    assert files_under(FOLDER) == before  # no model.pt, no __pycache__ in the script's folder
