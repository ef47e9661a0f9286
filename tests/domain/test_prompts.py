import pytest

from clap.domain import prompts


@pytest.mark.parametrize("units, says", [
    (["万元", "%"], "unit is one of 万元 %."),
    (["%", "USD", "million USD", ""], 'unit is one of % USD million USD, or "" for a number without one.'),  # counts
    ([""], 'unit is "": these facts have none.'),
    ([], "unit is the one written beside it."),                    # nothing named: the grammar alone constrains it
])
def test_the_extraction_prompt_names_the_project_s_units(units, says):
    system = prompts.system_extract(units)
    assert system.startswith("Extract the asked fact") and system.endswith(says)
