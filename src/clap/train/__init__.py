"""What the trainers share beyond one stage: the guards that stop a run (`guards`) and the decision task's
reward functions (`rewards`). The trainers themselves are the `clap.stages.train_*` stages."""
