"""olmpipe.difficulty: sampling like the trainer, scoring like the trainer, and the filter.

The statistics are checked against TRL's own arithmetic (``nanstd``, ``isclose``), the sampling
against the scripted bench of ``support.difficultybench`` (easy / hard / informative pages of known
pass probability) with the configured rewards, the filter against hand-made statistics.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random

import pytest
from support.difficultybench import ScriptedOCR, make_mixed_bench

from olmpipe.config import load_config, validate_config
from olmpipe.difficulty import (
    DifficultyError,
    FilterSettings,
    decoding_settings,
    drop_reason,
    filter_page_index,
)
from olmpipe.difficulty.sample import run_difficulty
from olmpipe.difficulty.score import group_spread, weighted_totals
from olmpipe.difficulty.settings import job_config
from olmpipe.generate import DecodingSettings
from olmpipe.generate.base import Completion, GenerationBackend, Sampling
from olmpipe.records.difficulty import PageDifficulty, read_dropped, read_stats, read_summary, write_stats
from olmpipe.records.generations import read_generations
from olmpipe.records.pages import read_page_index

GRPO = {"num_generations": 4, "temperature": 0.9, "top_p": 0.95, "max_completion_length": 48}


def config(**difficulty):
    return load_config(overrides={
        "train": {"grpo": GRPO, "difficulty": difficulty},
        "generation": {"batch_size": 8},
        "rewards": {"bench": {"processes": 0}},
    })


# ---------------------------------------------------------------- TRL's arithmetic


def test_group_spread_is_trls_nanstd_and_zero_test():
    """Mean, spread and the zero-spread flag equal TRL's ``nanmean``/``nanstd``/``isclose`` on the same groups."""
    import torch
    from trl.trainer.utils import nanstd

    rng = random.Random(0)
    groups = [[1.0] * 4, [0.0] * 4, [2.6] * 28, [0.1 + 0.2, 0.3, 0.3, 0.3], [1.0, None, 1.0, 1.0],
              [1.0, None, 0.0, 1.0], [None, None, 0.5, None]]
    groups += [[rng.choice([0.0, 0.25, 0.5, 1.0]) + rng.choice([0.0, 1.0]) for _ in range(8)] for _ in range(40)]
    for group in groups:
        tensor = torch.tensor([math.nan if v is None else v for v in group], dtype=torch.float32)
        mean, spread, zero = group_spread(group)
        expected_std = nanstd(tensor.view(1, -1), dim=1)[0]
        assert mean == torch.nanmean(tensor.view(1, -1), dim=1)[0].item()
        numbers = [v for v in group if v is not None]
        if math.isnan(expected_std.item()):
            assert spread is None and zero is False
        else:
            assert spread == expected_std.item()  # bit for bit
            trl_zero = bool(torch.isclose(expected_std, torch.zeros_like(expected_std)))
            assert zero == (trl_zero or len(set(numbers)) == 1), group
    assert group_spread([1.0, 1.0, 1.0]) == (1.0, 0.0, True)


def test_constant_groups_trl_misses_are_zero_spread():
    """Eight equal totals of 2.6 (bench 1.0 + front matter 0.6 + EOS 1.0): TRL's float32 std is
    2.5e-7, so its isclose test (and frac_reward_zero_std) misses the group; the stage does not."""
    import torch
    from trl.trainer.utils import nanstd

    std = nanstd(torch.full((1, 8), 2.6), dim=1)[0]
    assert std.item() > 0 and not torch.isclose(std, torch.zeros_like(std))
    _, spread, zero = group_spread([2.6] * 8)
    assert spread == std.item() and zero is True
    assert group_spread([2.6] * 7 + [2.6000001])[2] is True  # float32 rounding of equal rewards
    assert group_spread([2.6] * 7 + [2.61])[2] is False


def test_weighted_totals_are_trls_nansum_with_unscorable_rows():
    """The total is the weighted nansum over reward functions; a row every function left None is None."""
    per_func = [[1.0, None, 0.5, None], [0.5, 1.0, None, None]]
    assert weighted_totals(per_func, [1.0, 2.0]) == [2.0, 2.0, 0.5, None]


# ---------------------------------------------------------------- settings


def test_decoding_settings_follow_the_trainer():
    cfg = config()
    settings = decoding_settings(cfg)
    assert (settings.temperatures, settings.top_p, settings.max_new_tokens, settings.repeats) == ((0.9,), 0.95, 48, 4)
    assert (settings.top_k, settings.min_p, settings.repetition_penalty) == (0, 0.0, 1.0)
    assert decoding_settings(config(samples=7)).repeats == 7
    knobs = load_config(overrides={"train": {"grpo": {"top_k": 50, "min_p": 0.05, "repetition_penalty": 1.1}}})
    settings = decoding_settings(knobs)
    assert (settings.top_k, settings.min_p, settings.repetition_penalty) == (50, 0.05, 1.1)
    with pytest.raises(DifficultyError, match="generation_kwargs"):
        decoding_settings(load_config(overrides={"train": {"grpo": {"generation_kwargs": {"min_p": 0.1}}}}))


def test_job_config_holds_only_what_changes_the_samples():
    """The sampling rule's params: the trainer's sampling and the rewards rerun it; learning rate,
    the baseline's decoding ladder and the filter's thresholds do not."""
    base = job_config(config())
    for same in ({"train": {"grpo": {"learning_rate": 0.5, "max_steps": 99}}},
                 {"train": {"difficulty": {"min_spread": 0.2, "enabled": True, "max_pass_rate": 0.9}}},
                 {"generation": {"temperatures": [0.3], "repeats": 3, "seed": 5}}):
        cfg = config()
        cfg["train"]["grpo"].update(same.get("train", {}).get("grpo", {}))
        cfg["train"]["difficulty"].update(same.get("train", {}).get("difficulty", {}))
        cfg["generation"].update(same.get("generation", {}))
        assert job_config(cfg) == base, same
    for key, value in (("temperature", 0.7), ("top_p", 0.5), ("max_completion_length", 9), ("num_generations", 8)):
        cfg = config()
        cfg["train"]["grpo"][key] = value
        assert job_config(cfg) != base, key
    cfg = config()
    cfg["rewards"]["weights"]["eos"] = None
    assert job_config(cfg) != base
    # the job's own config is valid and samples the same (k resolved; batch knobs at their defaults)
    recipe = load_config(overrides={"train": {"grpo": {"num_generations": 28, "per_device_train_batch_size": 28,
                                                       "gradient_accumulation_steps": 1}}})
    job = validate_config(job_config(recipe))
    assert decoding_settings(job) == decoding_settings(recipe) and decoding_settings(job).repeats == 28


def test_samples_per_page_have_a_maximum():
    """Probe F12: k had no maximum, and a reward comparing a page's completions pairwise (medoid)
    costs k(k-1)/2 edit distances per page. The schema stops an explicit k above 128; a null k
    taking a larger num_generations stops the sampling job's config with the key to set."""
    from olmpipe.config import ConfigError
    from olmpipe.difficulty.settings import MAX_SAMPLES

    assert MAX_SAMPLES == 128 and job_config(config(samples=128))["train"]["difficulty"]["samples"] == 128
    with pytest.raises(ConfigError, match="train/difficulty/samples: 129 is greater than the maximum of 128"):
        config(samples=129)
    big = load_config(overrides={"train": {"grpo": {"num_generations": 256, "per_device_train_batch_size": 256},
                                           "difficulty": {"enabled": True}}})
    with pytest.raises(DifficultyError, match=r"train.difficulty.samples \(null: train.grpo.num_generations, 256\): "
                                              "at most 128"):
        job_config(big)


def test_training_jobs_unchanged_while_the_filter_is_off():
    """Off (the default), a seed's job config and resume settings are what they were before the
    stage existed; on, the filter's settings enter both."""
    from olmpipe.job.jobconfig import seed_config
    from olmpipe.job.resume import run_settings

    off = load_config()
    assert "difficulty" not in seed_config(off, 0)["train"]
    assert not any(k.startswith("train.difficulty") for k in run_settings(off, 0, "m"))
    on = load_config(overrides={"train": {"difficulty": {"enabled": True}}})
    assert seed_config(on, 0)["train"]["difficulty"]["enabled"] is True
    assert run_settings(on, 0, "m")["train.difficulty.min_spread"] == 0.0


def test_neutral_sampling_knobs_leave_fingerprints_and_requests_unchanged():
    """The baseline's decoding settings fingerprint the same fields as before top_k/min_p/
    repetition_penalty existed, and a Sampling with them off adds nothing to any backend's request."""
    settings = DecodingSettings.from_config(load_config()["generation"])
    assert set(settings.fingerprint_fields()) == {"max_new_tokens", "temperatures", "top_p", "seed"}
    assert Sampling(64, 0.1, 1.0, 3).extra_knobs() == {}
    on = DecodingSettings(**{**settings.__dict__, "top_k": 5})
    assert on.fingerprint_fields()["top_k"] == 5


def test_backends_pass_the_trainer_knobs_when_on(tmp_path):
    from PIL import Image

    from olmpipe.generate.base import PageRequest
    from olmpipe.generate.openai_backend import OpenAIBackend
    from olmpipe.generate.vllm_backend import VLLMBackend

    image = tmp_path / "p.png"
    Image.new("RGB", (8, 8)).save(image)
    request = PageRequest("a.pdf", 1, 1, str(image))
    knobs = Sampling(8, 1.0, 0.9, 1, top_k=20, min_p=0.05, repetition_penalty=1.2)
    payload = OpenAIBackend.from_config(load_config()["generation"]).payload(request, knobs)
    assert (payload["top_k"], payload["min_p"], payload["repetition_penalty"]) == (20, 0.05, 1.2)
    plain = OpenAIBackend.from_config(load_config()["generation"]).payload(request, Sampling(8, 1.0, 0.9, 1))
    assert not {"top_k", "min_p", "repetition_penalty"} & set(plain)

    seen = []

    class Processor:
        def apply_chat_template(self, messages, **kwargs):
            return "prompt"

    class Engine:
        def generate(self, prompts, sampling_params, use_tqdm):
            return [type("R", (), {"prompt_token_ids": [1], "outputs": []})() for _ in prompts]

    backend = VLLMBackend(Engine(), Processor(), sampling_params_cls=lambda **kw: seen.append(kw) or kw)
    backend.generate([request, request], [knobs, Sampling(8, 1.0, 0.9, 1)])
    assert seen[0]["top_k"] == 20 and seen[0]["min_p"] == 0.05 and seen[0]["repetition_penalty"] == 1.2
    assert set(seen[1]) == {"n", "temperature", "top_p", "max_tokens", "seed"}


# ---------------------------------------------------------------- sampling and scoring


@pytest.fixture
def mixed(tmp_path):
    """A scripted bench: 3 easy, 2 hard, 3 informative train pages, one eval page."""
    return make_mixed_bench(tmp_path / "bench", {"easy": 3, "hard": 2, "informative": 3})


def test_sampled_statistics_of_known_pages(tmp_path, mixed, tiny_model_dir):
    """Easy pages: all pass, zero spread; hard: all fail, zero spread; informative: the spread and
    pass rates of their scripted answers, scored by the configured rewards (bench + front matter + EOS)."""
    pages, tests, kinds = mixed
    backend = ScriptedOCR(kinds)
    out = tmp_path / "difficulty"
    summary = run_difficulty(config(), tiny_model_dir, pages, tests, out, backend=backend, progress=False)
    stats = {p.pdf: p for p in read_stats(out / "stats.jsonl")}
    assert set(stats) == set(kinds)  # train pages only
    assert backend.requests == len(kinds) * 4
    for pdf, page in stats.items():
        assert page.samples == page.scored == 4
        assert page.by_reward["front_matter_reward"] == 0.5 and page.by_reward["eos_reward"] == 1.0
        if kinds[pdf] == "easy":
            assert page.all_pass and page.zero_spread and page.pass_rate == 1.0 and page.rewards == [2.5] * 4
        elif kinds[pdf] == "hard":  # scans.jsonl pages also pass their absent test
            assert page.zero_spread and {v for t, v in page.tests.items() if not t.endswith("-h")} == {0.0}
            assert page.all_fail == (not any(t.endswith("-h") for t in page.tests))
        else:  # the scripted answers, scored by hand: bench reward = share of the page's tests passed
            answers = [backend.answer(pdf, s) for s in _seeds(out, pdf)]
            present = [("first finding" in t) + ("second finding" in t) for t in answers]
            n_tests = 3 if any(t.endswith("-h") for t in page.tests) else 2  # scans.jsonl: + an absent test
            expected = [(n + (n_tests - 2)) / n_tests + 1.5 for n in present]
            assert page.rewards == pytest.approx(expected)
            assert page.zero_spread == (len(set(present)) == 1)
    assert summary["zero_spread"] == sum(p.zero_spread for p in stats.values())
    assert summary["all_pass"] == 3 and summary["all_fail"] == sum(p.all_fail for p in stats.values())
    generations = read_generations(out / "generations.jsonl")
    assert len(generations) == len(kinds) * 4
    assert len({g["attempts"][0]["seed"] for g in generations}) == len(generations)  # distinct seeds
    assert {g["attempts"][0]["temperature"] for g in generations} == {0.9}


def _seeds(out, pdf):
    return [g["attempts"][0]["seed"] for g in read_generations(out / "generations.jsonl") if g["pdf"] == pdf]


class Refuses(GenerationBackend):
    name = "refuses"

    def generate(self, requests, sampling):
        raise AssertionError("nothing should be generated")


def test_rerun_reuses_the_journal_and_a_new_temperature_samples_again(tmp_path, mixed, tiny_model_dir):
    pages, tests, kinds = mixed
    out = tmp_path / "difficulty"
    first = run_difficulty(config(), tiny_model_dir, pages, tests, out, backend=ScriptedOCR(kinds), progress=False)
    stats = read_stats(out / "stats.jsonl")
    for name in ("generations.jsonl", "stats.jsonl", "summary.json"):
        (out / name).unlink()  # Snakemake deletes declared outputs before a rerun
    again = run_difficulty(config(), tiny_model_dir, pages, tests, out, backend=Refuses(), progress=False)
    assert (again["generated"], again["reused"]) == (0, first["generations"])
    assert read_stats(out / "stats.jsonl") == stats
    hotter = config()
    hotter["train"]["grpo"]["temperature"] = 1.3
    backend = ScriptedOCR(kinds)
    third = run_difficulty(hotter, tiny_model_dir, pages, tests, out, backend=backend, progress=False)
    assert third["generated"] == first["generations"] and backend.requests == first["generations"]


class Flaky(ScriptedOCR):
    """Fails every request of one page in the backend."""

    def generate(self, requests, sampling):
        out = super().generate(requests, sampling)
        return [Completion("", "error", error="server said no") if r.pdf == "p000.pdf" else c
                for r, c in zip(requests, out, strict=True)]


def test_backend_failures_are_not_scored_and_bounded(tmp_path, mixed, tiny_model_dir):
    pages, tests, kinds = mixed
    with pytest.raises(DifficultyError, match="max_error_fraction"):
        run_difficulty(config(), tiny_model_dir, pages, tests, tmp_path / "a", backend=Flaky(kinds), progress=False)
    cfg = config()
    cfg["generation"]["max_error_fraction"] = 0.5
    run_difficulty(cfg, tiny_model_dir, pages, tests, tmp_path / "b", backend=Flaky(kinds), progress=False)
    failed = next(p for p in read_stats(tmp_path / "b" / "stats.jsonl") if p.pdf == "p000.pdf")
    assert (failed.scored, failed.errors, failed.rewards, failed.spread) == (0, 4, [None] * 4, None)


# ---------------------------------------------------------------- the filter


def _page(pdf, spread, *, zero=None, pass_rate=0.5, all_pass=False, all_fail=False, jsonl="a.jsonl", types=("present",)):
    zero = (spread == 0.0) if zero is None else zero
    return PageDifficulty(pdf, 1, 4, 4 if spread is not None else 1, [1.0] * 4, 1.0, spread, zero, {}, pass_rate,
                          {}, all_pass, all_fail, [jsonl], list(types))


def _index(tmp_path, pdfs, eval_pdfs=("e.pdf",)):
    path = tmp_path / "pages.jsonl"
    rows = [{"pdf": p, "page": 1, "image": f"{p}.png", "split": "train", "bench_dir": "b", "test_ids": ["t"],
             "jsonl_files": {"t": "a.jsonl"}, "types": {"t": "present"}} for p in pdfs]
    rows += [{**rows[0], "pdf": p, "split": "eval"} for p in eval_pdfs]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sampled(tmp_path, stats, *, skipped_no_tests=0):
    """The sampling run's summary.json beside stats.jsonl, as :func:`run_difficulty` writes it (the
    pages it sampled and scored)."""
    write_stats(tmp_path / "stats.jsonl", stats)
    summary = {"pages": len(stats), "sampled_pages": [{"pdf": p.pdf, "page": p.page} for p in stats],
               "dataset": {"skipped_no_tests": skipped_no_tests, "skipped_filtered": 0}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))


def test_a_sampled_page_without_statistics_is_an_error_and_an_unsampled_one_a_reason(tmp_path):
    """Issue 31 item 5: a page's line deleted from stats.jsonl, and the filter kept the page without
    saying so (filter.json counted 7 kept, the index had 8). A page the sampler sampled needs its
    line (the error names it); a train page the sampler skipped (no tests after the reward filters,
    which the trainer skips too) is a line of dropped.jsonl with its reason, and filter.json's
    `kept` is the filtered index's train pages."""
    stats = [_page("a.pdf", 0.3), _page("b.pdf", 0.0), _page("c.pdf", 0.4)]
    _sampled(tmp_path, stats, skipped_no_tests=1)
    index = _index(tmp_path, ["a.pdf", "b.pdf", "c.pdf", "n.pdf"])
    args = (tmp_path / "o.jsonl", tmp_path / "d.jsonl", tmp_path / "f.json")
    summary = filter_page_index(tmp_path / "stats.jsonl", index, *args, FilterSettings(), num_generations=4)
    train = [r["pdf"] for r in read_page_index(tmp_path / "o.jsonl") if r["split"] == "train"]
    assert train == ["a.pdf", "c.pdf"] and summary["kept"] == len(train)
    dropped = {d["pdf"]: d["reason"] for d in read_dropped(tmp_path / "d.jsonl")}
    assert dropped == {"b.pdf": "zero_spread", "n.pdf": "not_sampled"}
    assert summary["dropped_by_reason"]["not_sampled"] == 1 and summary["sampled"] == 3
    # the line of c.pdf deleted: an error naming the page and both files; nothing written
    for path in args:
        path.unlink()
    write_stats(tmp_path / "stats.jsonl", stats[:2])
    with pytest.raises(DifficultyError, match=r"stats.jsonl has no line for c.pdf page 1, a page the sampling run "
                                              r"sampled \(.*summary.json lists it\)"):
        filter_page_index(tmp_path / "stats.jsonl", index, *args, FilterSettings(), num_generations=4)
    assert not any(path.exists() for path in args)
    # a summary of an older release (no page list): the count tells
    (tmp_path / "summary.json").write_text(json.dumps({"pages": 3}))
    with pytest.raises(DifficultyError, match=r"stats.jsonl has 2 lines, but the sampling run scored 3 pages"):
        filter_page_index(tmp_path / "stats.jsonl", index, *args, FilterSettings(), num_generations=4)
    (tmp_path / "summary.json").unlink()
    with pytest.raises(DifficultyError, match=r"no summary.json beside .*stats.jsonl"):
        filter_page_index(tmp_path / "stats.jsonl", index, *args, FilterSettings(), num_generations=4)


def test_drop_reasons():
    s = FilterSettings(min_spread=0.1, min_pass_rate=0.2, max_pass_rate=0.8)
    assert drop_reason(_page("a", 0.0, all_pass=True), s) == "zero_spread"
    assert drop_reason(_page("a", 0.05), s) == "low_spread"
    assert drop_reason(_page("a", 0.5, pass_rate=0.1), s) == "pass_rate_below_min"
    assert drop_reason(_page("a", 0.5, pass_rate=0.9), s) == "pass_rate_above_max"
    assert drop_reason(_page("a", 0.5), s) is None
    assert drop_reason(_page("a", None), s) is None  # unknown spread: kept
    assert drop_reason(_page("a", 5e-9, zero=True), FilterSettings()) == "zero_spread"  # TRL's isclose


def test_filter_drops_exactly_the_flagged_pages_and_lists_them(tmp_path):
    stats = [_page("a.pdf", 0.0, all_pass=True), _page("b.pdf", 0.3), _page("c.pdf", 0.0, all_fail=True,
             jsonl="b.jsonl", types=("table", "present")), _page("d.pdf", None), _page("f.pdf", 0.01)]
    _sampled(tmp_path, stats)
    index = _index(tmp_path, ["a.pdf", "b.pdf", "c.pdf", "d.pdf", "f.pdf", "g.pdf"])
    summary = filter_page_index(tmp_path / "stats.jsonl", index, tmp_path / "out.jsonl", tmp_path / "dropped.jsonl",
                                tmp_path / "filter.json", FilterSettings(min_spread=0.05), num_generations=8)
    kept = [(r["pdf"], r["split"]) for r in read_page_index(tmp_path / "out.jsonl")]
    # e.pdf is an eval page: it stays; g.pdf was not sampled (no tests after the reward filters): a reason
    assert kept == [("b.pdf", "train"), ("d.pdf", "train"), ("e.pdf", "eval")]
    dropped = {d["pdf"]: d["reason"] for d in read_dropped(tmp_path / "dropped.jsonl")}
    assert dropped == {"a.pdf": "zero_spread", "c.pdf": "zero_spread", "f.pdf": "low_spread", "g.pdf": "not_sampled"}
    assert summary == read_summary(tmp_path / "filter.json")
    assert (summary["sampled"], summary["kept"], summary["dropped"], summary["unscored_kept"]) == (5, 2, 4, 1)
    assert summary["not_sampled"] == 1
    assert summary["dropped_by_reason"]["zero_spread"] == 2 and summary["dropped_all_pass"] == 1
    assert summary["by_jsonl"] == {"a.jsonl": {"sampled": 4, "dropped": 2}, "b.jsonl": {"sampled": 1, "dropped": 1}}
    assert summary["by_type"]["table"] == {"sampled": 1, "dropped": 1}
    assert summary["rollouts_saved_per_epoch"] == 24 and summary["zero_spread_share"] == 0.5
    assert summary["zero_spread_share_kept"] == 0.0


def test_filter_refuses_bad_inputs_with_their_reason(tmp_path):
    _sampled(tmp_path, [_page("a.pdf", 0.0), _page("b.pdf", 0.0)])
    index = _index(tmp_path, ["a.pdf", "b.pdf"])
    args = (tmp_path / "o.jsonl", tmp_path / "d.jsonl", tmp_path / "f.json")
    with pytest.raises(DifficultyError, match="would drop all 2 sampled train pages"):
        filter_page_index(tmp_path / "stats.jsonl", index, *args, FilterSettings(), num_generations=4)
    assert not (tmp_path / "o.jsonl").exists()
    stale = _index(tmp_path, ["a.pdf", "x.pdf"])
    with pytest.raises(DifficultyError, match="b.pdf page 1 is not a train page"):
        filter_page_index(tmp_path / "stats.jsonl", stale, *args, FilterSettings(), num_generations=4)
    _sampled(tmp_path, [_page("a.pdf", 0.3, pass_rate=None), _page("b.pdf", 0.3, pass_rate=None)])
    with pytest.raises(DifficultyError, match="select rewards.weights.bench"):
        filter_page_index(tmp_path / "stats.jsonl", _index(tmp_path, ["a.pdf", "b.pdf"]), *args,
                          FilterSettings(min_pass_rate=0.1), num_generations=4)
    (tmp_path / "stats.jsonl").write_text('{"pdf": "a.pdf"}\n')
    with pytest.raises(DifficultyError, match=r"stats.jsonl:1: missing field\(s\) page"):
        filter_page_index(tmp_path / "stats.jsonl", index, *args, FilterSettings(), num_generations=4)


def test_filter_keeping_fewer_pages_than_one_training_batch_stops_there(tmp_path):
    """Probe F9: on the embedded default the filter kept 1 of 15 pages and succeeded; training then
    stopped with "the training set has 1 page(s) but one generation batch takes 2", inside the
    submitted job. The filter knows both numbers: it refuses, counts the drops and names what helps
    (F11: not "lower min_spread" when it is 0 already)."""
    from olmpipe.difficulty.settings import training_batch_pages

    stats = [_page("a.pdf", 0.0, all_pass=True), _page("b.pdf", 0.0, all_fail=True), _page("c.pdf", 0.3)]
    _sampled(tmp_path, stats)
    index = _index(tmp_path, ["a.pdf", "b.pdf", "c.pdf"])
    args = (tmp_path / "o.jsonl", tmp_path / "d.jsonl", tmp_path / "f.json")
    with pytest.raises(DifficultyError) as caught:
        filter_page_index(tmp_path / "stats.jsonl", index, *args, FilterSettings(), num_generations=4, batch_pages=2)
    message = str(caught.value)
    assert message.startswith("train.difficulty would keep 1 of 3 train pages (dropped: 2 zero_spread), fewer than "
                              "one generation batch of training takes (2 pages")
    assert "rewards.weights.medoid: 0.1" in message and "min_spread" not in message
    assert not any(p.exists() for p in args)  # nothing written
    assert filter_page_index(tmp_path / "stats.jsonl", index, *args, FilterSettings(), num_generations=4,
                             batch_pages=1)["kept"] == 1
    # the batch the trainer will draw: TRL's arithmetic, seed overrides and training processes included
    cfg = load_config()
    assert training_batch_pages(cfg) == 2  # the embedded default: 4 x 1 process x 2 / 4
    cfg["train"]["seed_overrides"] = [{"seed": 1, "grpo": {"per_device_train_batch_size": 8}}]
    assert training_batch_pages(cfg) == 2  # seed 1 is not trained
    cfg["train"]["seeds"] = [0, 1]
    assert training_batch_pages(cfg) == 4
    cfg["resources"]["train"].update(gpu=2, strategy="ddp")
    assert training_batch_pages(cfg) == 8
    _sampled(tmp_path, [_page("a.pdf", 0.05), _page("b.pdf", 0.5, pass_rate=0.9)])
    with pytest.raises(DifficultyError, match=r"lower train.difficulty.min_spread \(now 0.1\); raise or unset "
                                              r"train.difficulty.max_pass_rate \(now 0.8\)"):
        filter_page_index(tmp_path / "stats.jsonl", _index(tmp_path, ["a.pdf", "b.pdf"]), *args,
                          FilterSettings(min_spread=0.1, max_pass_rate=0.8), num_generations=4)


def test_command_line_runs_both_steps(tmp_path, mixed, tiny_model_dir, monkeypatch):
    """``olmpipe difficulty`` on a config: sample (the configured backend replaced by the scripted
    one) and filter; exit 1 with one line for a missing page index."""
    import olmpipe.generate.journal
    from olmpipe.cli import main

    pages, tests, kinds = mixed
    monkeypatch.setattr(olmpipe.generate.journal, "make_backend", lambda generation, model: ScriptedOCR(kinds))
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(json.dumps({"train": {"grpo": GRPO}, "rewards": {"bench": {"processes": 0}}}))
    out = tmp_path / "out"
    assert main(["difficulty", "--config", str(cfg_file), "--model", str(tiny_model_dir), "--pages", str(pages),
                 "--tests", str(tests), "--out", str(out), "--no-progress"]) == 0
    dropped = {d["pdf"] for d in read_dropped(out / "dropped.jsonl")}
    assert {pdf for pdf, kind in kinds.items() if kind != "informative"} <= dropped
    kept = {r["pdf"] for r in read_page_index(out / "train_pages.jsonl")}
    assert kept.isdisjoint(dropped) and kept | dropped == {*kinds, "e000.pdf"}
    assert main(["difficulty", "filter", "--config", str(cfg_file), "--pages", str(tmp_path / "none.jsonl"),
                 "--out", str(out)]) == 1


# ---------------------------------------------------------------- one sampler per journal, none outliving its job


class HeldServer:
    """A chat-completions endpoint that holds its first request until :meth:`release` (a gate: the test
    acts while the sampler is known to be generating), then answers every request alike."""

    ANSWER = ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
              "is_diagram: False\n---\nSome page text")

    def __init__(self):
        import threading

        from support.localhttp import LocalHttpServer, QuietHandler

        self.reached, self.released = threading.Event(), threading.Event()
        owner = self

        class Handler(QuietHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.reached.set()
                owner.released.wait(600)
                body = json.dumps({"id": "x", "object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": owner.ANSWER}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.http = LocalHttpServer(Handler)

    def __enter__(self):
        self.http.__enter__()
        return self

    def __exit__(self, *exc):
        self.released.set()
        self.http.__exit__(*exc)


def _wait_for(what, condition, timeout: float = 300):
    """Until ``condition()`` holds (a gate on a file or process; the deadline only ends a broken run)."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_sampler_stops_with_its_snakemake_and_a_second_one_on_its_journal_refuses(tmp_path, mixed, tiny_model_dir):
    """Issue 31 item 8: after kill -9 of Snakemake a running difficulty_sample went on, and
    --rerun-incomplete started a second sampler on the same journal (116 of 720 generations made
    twice). The journal has one writer (a lock naming it): a second sampler stops at once with exit 1,
    naming the first's pid; and with --exit-with-job (the workflow's) the sampler stops when the
    process that started it is gone, keeping its journal, and frees the lock."""
    import os
    import subprocess
    import sys

    from olmpipe.procs import HolderLock
    from olmpipe.records.generations import JOURNAL_LOCK_NAME

    pages, tests, _ = mixed
    out = tmp_path / "out"
    with HeldServer() as server:
        cfg_file = tmp_path / "c.yaml"
        cfg_file.write_text(json.dumps({
            "train": {"grpo": GRPO}, "rewards": {"bench": {"processes": 0}},
            "generation": {"backend": "openai", "batch_size": 4, "openai": {
                "base_url": f"{server.http.base_url}/v1", "concurrency": 1, "retries": 0, "timeout_s": 900}}}))
        cmd = [sys.executable, "-m", "olmpipe.difficulty", "sample", "--config", str(cfg_file), "--model",
               str(tiny_model_dir), "--pages", str(pages), "--tests", str(tests), "--out", str(out), "--no-progress"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        # the job's place (Snakemake's): a parent that starts the sampler, prints its pid and waits
        starter = "import subprocess,sys; p=subprocess.Popen(sys.argv[1:]); print(p.pid, flush=True); p.wait()"
        log = tmp_path / "sampler.log"
        with open(log, "w") as fh:
            parent = subprocess.Popen([sys.executable, "-c", starter, *cmd, "--exit-with-job"], env=env,
                                      stdout=subprocess.PIPE, stderr=fh, text=True)
        sampler = int(parent.stdout.readline())
        _wait_for("the sampler's first request", lambda: server.reached.is_set() or parent.poll() is not None)
        assert server.reached.is_set(), log.read_text()[-3000:]
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert second.returncode == 1, second.stderr[-3000:]
        assert f"{out / 'generations.journal.jsonl'} is being written by another job (pid {sampler} on " \
            in second.stderr, second.stderr[-3000:]
        parent.kill()  # kill -9 of the job: the sampler is re-parented
        parent.wait()
        _wait_for("the sampler to notice", lambda: "the job that started this sampler is gone" in log.read_text())
        server.released.set()

        def gone() -> bool:
            try:
                return open(f"/proc/{sampler}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
            except OSError:
                return True

        _wait_for("the sampler to exit", gone, timeout=300)
    text = log.read_text()
    assert "sampler: SIGTERM, stopping (exit 75; what it finished is kept)" in text, text[-3000:]
    assert not (out / "stats.jsonl").exists()  # it stopped; nothing pretends to be finished
    HolderLock(out / JOURNAL_LOCK_NAME).acquire().release()  # free again


# ---------------------------------------------------------------- acceptance: known rewards, real training


class KnownPageReward:
    """A reward known per page: the pages of ``constant`` always get their value, every other page a
    number that differs between different completions (a hash of the token ids in [0, 1))."""

    def __init__(self, constant):
        self.constant = dict(constant)
        self.__name__ = "known_page_reward"

    def __call__(self, prompts=None, completions=None, completion_ids=None, pdf=None, page=None, log_extra=None,
                 **kwargs):
        import zlib

        if log_extra is not None:
            log_extra("page_id", [f"{p}#{g}" for p, g in zip(pdf, page, strict=True)])
        return [self.constant[p] if p in self.constant else zlib.crc32(bytes(str(ids), "ascii")) % 1000 / 1000
                for p, ids in zip(pdf, completion_ids, strict=True)]


@pytest.mark.slow
def test_constant_reward_pages_are_dropped_and_training_keeps_no_zero_spread_group(tmp_path, tiny_model_dir):
    """Two of four train pages have a constant reward: the stage (the tiny model, the transformers
    backend, 4 samples per page) drops exactly those two, and GRPO on the filtered index logs no
    zero-spread group at any step, where the unfiltered index gives half its groups no signal."""
    from trainkit import make_page_index

    from olmpipe.records.metrics import read_metrics
    from olmpipe.train.run import train_seed

    pages, tests = make_page_index(tmp_path, n_train=4, n_eval=0, extra_empty=False)
    train_pdfs = [r["pdf"] for r in read_page_index(pages)]
    reward = KnownPageReward({train_pdfs[0]: 1.0, train_pdfs[2]: 0.0})
    grpo = {"num_generations": 4, "max_completion_length": 8, "temperature": 1.0, "max_steps": 2,
            "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "save_steps": 1000,
            "logging_steps": 1}
    cfg = load_config(overrides={"train": {"grpo": grpo, "wandb": {"mode": "disabled"}},
                                 "generation": {"batch_size": 16, "transformers": {"device": "cpu"}}})
    out = tmp_path / "difficulty"
    run_difficulty(cfg, tiny_model_dir, pages, tests, out, reward_funcs=[reward], progress=False)
    filter_page_index(out / "stats.jsonl", pages, out / "train_pages.jsonl", out / "dropped.jsonl",
                      out / "filter.json", FilterSettings(), num_generations=4)
    dropped = {d["pdf"]: d["reason"] for d in read_dropped(out / "dropped.jsonl")}
    assert dropped == {train_pdfs[0]: "zero_spread", train_pdfs[2]: "zero_spread"}
    kept = [r["pdf"] for r in read_page_index(out / "train_pages.jsonl")]
    assert kept == [train_pdfs[1], train_pdfs[3]]

    run = tmp_path / "filtered"
    assert train_seed(cfg, seed=0, model_path=tiny_model_dir, pages=out / "train_pages.jsonl", tests_dir=tests,
                      run_dir=run, reward_funcs=[reward]) == 0
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["frac_reward_zero_std"] for r in rows] == [0.0, 0.0]
    seen = {json.loads(line)["page"].split("#")[0] for f in (run / "completions").iterdir()
            for line in f.read_text().splitlines()}
    assert seen == set(kept)

    # the same training on every page: the two constant pages are zero-spread groups (the test can fail)
    everything = tmp_path / "unfiltered"
    cfg["train"]["grpo"].update(per_device_train_batch_size=16, max_steps=1)
    assert train_seed(cfg, seed=0, model_path=tiny_model_dir, pages=pages, tests_dir=tests, run_dir=everything,
                      reward_funcs=[reward]) == 0
    assert [r["frac_reward_zero_std"] for r in read_metrics(everything / "metrics.jsonl")] == [0.5]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_stage_samples_through_vllm_with_the_trainers_knobs(tmp_path, tiny_model_dir):
    """``python -m olmpipe.difficulty sample`` with vLLM's engine (the CPU build here): k samples per
    page in one attempt each, distinct seeds, top_k passed on; a rerun generates nothing."""
    import os
    import subprocess
    import sys

    pages, tests, _ = make_mixed_bench(tmp_path / "bench", {"easy": 1, "hard": 1, "informative": 1})
    settings = {
        "generation": {"backend": "vllm", "batch_size": 16,
                       "vllm": {"dtype": "float32", "max_model_len": 4096, "cpu_kv_cache_gb": 0.5}},
        "rewards": {"bench": {"processes": 0}},
        "train": {"grpo": {"max_completion_length": 8, "temperature": 1.0, "top_k": 20},
                  "difficulty": {"samples": 3}},
    }
    out = tmp_path / "difficulty"
    cmd = [sys.executable, "-m", "olmpipe.difficulty", "sample", "--settings", json.dumps(settings), "--model",
           str(tiny_model_dir), "--pages", str(pages), "--tests", str(tests), "--out", str(out), "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    for _ in range(2):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
        assert proc.returncode == 0, proc.stderr[-4000:]
    generations = read_generations(out / "generations.jsonl")
    assert len(generations) == 9 and {g["backend"] for g in generations} == {"vllm"}
    assert all(len(g["attempts"]) == 1 and g["attempts"][0]["temperature"] == 1.0 for g in generations)
    assert len({g["attempts"][0]["seed"] for g in generations}) == 9
    assert all(g["completion_tokens"] >= 1 for g in generations)
    summary = read_summary(out / "summary.json")
    assert (summary["generated"], summary["reused"], summary["sampling"]["top_k"]) == (0, 9, 20)
    assert len(read_stats(out / "stats.jsonl")) == 3
