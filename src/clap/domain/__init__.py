"""The domain core, the ground floor of the house: what a fact, a question and an answer are, independent of how
they are produced, trained on, judged or shipped.

- `quantities`: numbers with units and scale, currencies, periods, metric keys — how two answers are compared;
- `prompts`: the system prompts, the answer's keys and the prompt builders the application and training share;
- `contracts`: the raw inputs' and every asset's and record's schema (Pandera and pydantic).

It imports nothing of CLAP but `clap.io` and `clap.errors`; every other package may import it
(the intended order of the packages is written once, in `clap.LAYERS`).
"""
