"""TensorFlow on the ranks: MultiWorkerMirroredStrategy and ParameterServerStrategy across Spark tasks.

Uses only APIs that TensorFlow 2.15 (Keras 2, numpy 1) and current TensorFlow (Keras 3, numpy 2) share.
Keras 3 does not run `fit` under MultiWorkerMirroredStrategy (keras-team/keras#20585), so the Keras test
uses Keras 2: `tf.keras` where it is Keras 2, else the `tf_keras` package; the custom training loop
and the parameter-server test use TensorFlow alone.
"""

import json
import os

import numpy as np
import pytest

from hopsml import experiment
from hopsml.errors import ExperimentFailed, HopsmlError

pytest.importorskip("tensorflow")


def _record(logdir):
    with open(os.path.join(logdir, "experiment.json")) as f:
        return json.load(f)


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
    return x, y


def _keras2_module():
    """The name of a Keras 2 implementation to import on the ranks."""
    keras = pytest.importorskip("keras")
    if int(keras.__version__.split(".")[0]) < 3:
        return "keras"  # TensorFlow up to 2.15: tf.keras is this Keras 2
    pytest.importorskip("tf_keras", reason="Keras 3 cannot fit under MultiWorkerMirroredStrategy "
                                           "(keras-team/keras#20585): pip install tf-keras")
    return "tf_keras"


def train_mirrored(keras_module):
    import importlib

    import tensorflow as tf

    from hopsml import tensorboard

    keras = importlib.import_module(keras_module)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = _data()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)
    with strategy.scope():
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    history = model.fit(dataset, epochs=4, verbose=0)
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    return {"loss": [float(v) for v in history.history["loss"]], "weights": weights.tolist(),
            "replicas": int(strategy.num_replicas_in_sync), "task": json.loads(os.environ["TF_CONFIG"])["task"],
            "logdir": tensorboard.logdir()}


def test_mirrored_trains_a_keras_model_on_two_ranks(spark, root):
    keras_module = _keras2_module()
    logdir, result = experiment.mirrored(lambda: train_mirrored(keras_module), name="mirrored", num_workers=2,
                                         metric_key="replicas", local_logdir=True)
    rec = _record(logdir)
    assert rec["state"] == "FINISHED" and rec["type"] == "DISTRIBUTED_TRAINING" and rec["executors"] == 2
    chief, other = rec["results"]
    assert result == chief and chief["task"] == {"type": "worker", "index": 0} and other["task"]["index"] == 1
    assert chief["replicas"] == 2 and rec["metric"] == 2
    np.testing.assert_allclose(chief["weights"], other["weights"], rtol=0, atol=1e-6)  # kept in sync
    assert chief["loss"][-1] < chief["loss"][0] / 2
    assert sorted(os.listdir(os.path.join(logdir, "logs"))) == ["worker_0.log", "worker_1.log"]
    assert not chief["logdir"].startswith(str(root))  # local_logdir: the executor's disk


def train_mirrored_loop():
    import tensorflow as tf

    from hopsml import timeline

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = _data()
    with strategy.scope():  # updates in a replica are averaged over the replicas
        w = tf.Variable(tf.zeros([4, 1]), aggregation=tf.VariableAggregation.MEAN)
        b = tf.Variable(tf.zeros([1]), aggregation=tf.VariableAggregation.MEAN)
    dataset = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32))
    batches = iter(dataset)

    @tf.function
    def step(it):
        def replica_step(features, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(features, w) + b - labels))
            grad_w, grad_b = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * grad_w)
            b.assign_sub(0.1 * grad_b)
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(replica_step, args=next(it)), axis=None)

    losses = []
    for _ in range(30):
        with timeline.span("step"):
            losses.append(float(step(batches)))
    return {"first": losses[0], "last": losses[-1], "w": w.numpy().ravel().tolist() + b.numpy().tolist(),
            "replicas": int(strategy.num_replicas_in_sync)}


def test_mirrored_custom_training_loop_again_in_the_same_session(spark, root):
    """A second TensorFlow run on the reused Spark workers (TensorFlow's servers ended with the first)."""
    logdir, result = experiment.mirrored(train_mirrored_loop, name="loop", num_workers=2)
    record = _record(logdir)
    chief, other = record["results"]
    assert result["replicas"] == 2 and result["last"] < result["first"] / 10
    np.testing.assert_allclose(chief["w"], other["w"], rtol=0, atol=1e-6)
    np.testing.assert_allclose(chief["w"], [1.0, -2.0, 0.5, 3.0, 0.0], atol=0.3)
    # each rank's timeline: its spans in one trace, its system metrics; TensorFlow's collectives name no stragglers
    with open(os.path.join(logdir, "timeline", "trace.json")) as f:
        steps = [e["pid"] for e in json.load(f)["traceEvents"] if e.get("name") == "step"]
    assert sorted(steps) == [0] * 30 + [1] * 30
    assert set(record["system"]["peaks"]) == {"0", "1"} and "stragglers" not in record


def test_mirrored_failure_names_the_rank(spark, root):
    def fails():
        import os

        if os.environ["RANK"] == "1":
            raise RuntimeError("bad batch on rank 1")
        return 1.0

    with pytest.raises(ExperimentFailed, match="rank 1 raised RuntimeError: bad batch on rank 1"):
        experiment.mirrored(fails, name="fails", num_workers=2)


def test_evaluator_and_layout_checks(spark, root):
    with pytest.raises(HopsmlError, match="at least one worker"):
        experiment.mirrored(lambda: 1, num_workers=1, evaluator=True)
    with pytest.raises(HopsmlError, match="num_ps >= 1"):
        experiment.parameter_server(lambda: 1, num_ps=0)


def train_coordinator():
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    x, y = _data()
    with strategy.scope():
        w = tf.Variable(tf.zeros([4, 1]))

    def dataset_fn():
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step(it):
        def replica_step(features, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(features, w) - labels))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss

        features, labels = next(it)
        return strategy.run(replica_step, args=(features, labels))

    losses = [coordinator.schedule(step, args=(iterator,)) for _ in range(30)]
    coordinator.join()
    values = [float(loss.fetch()) for loss in losses]
    return {"first": values[0], "last": values[-1], "w": w.numpy().ravel().tolist(),
            "cluster": resolver.cluster_spec().as_dict()}


def test_parameter_server_chief_ps_and_worker(spark, root):
    logdir, result = experiment.parameter_server(train_coordinator, name="ps", num_workers=1, num_ps=1)
    rec = _record(logdir)
    assert rec["state"] == "FINISHED" and rec["executors"] == 3
    assert sorted(result["cluster"]) == ["chief", "ps", "worker"]
    assert result["last"] < result["first"] / 10
    np.testing.assert_allclose(result["w"], [1.0, -2.0, 0.5, 3.0], atol=0.2)
    for rank in (1, 2):  # the ps and the worker served until the chief was done, then stopped
        log = open(os.path.join(logdir, "logs", f"worker_{rank}.log")).read()
        assert "serving at" in log and "stopping" in log
    assert set(rec["system"]["peaks"]) == {"0", "1", "2"}  # the servers' memory and CPU too
    assert rec["timeline"]["trace"].endswith("trace.json") and "stragglers" not in rec


def test_parameter_server_chief_failure_stops_the_servers(spark, root):
    def chief_fails():
        raise ValueError("no data for the coordinator")

    with pytest.raises(ExperimentFailed, match="rank 0 raised ValueError: no data for the coordinator"):
        experiment.parameter_server(chief_fails, name="ps-fails", num_workers=1, num_ps=1)
    _, result = experiment.launch(lambda: {"metric": 1}, name="after")  # the cluster is free again
    assert result == {"metric": 1}
