"""Both sides of a barrier stage, laid out by process role as Horovod's spark/ package is: the driver side
(`driver`: run a stage, its monitor, the driver's channel), the task side (`task/`: what runs inside a Spark
task), and what both share (`spec`: what a task is told; `messages`: what travels between them, typed;
`channel`: the authenticated connection they travel on; `seeds`: the run's seed)."""
