"""The tool-calling agent track: a sandboxed environment over the assets, tasks with gold
trajectories, rollouts, rewards and agent metrics. Trainers and stages live in `clap.stages`."""
