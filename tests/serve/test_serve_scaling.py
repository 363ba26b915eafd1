"""The replicas of a deployment (``dynshape/serve/scaling.py``): a fixed number, or Ray Serve's
autoscaling between two bounds; every wrong combination refused before Ray starts, with its
message."""

from __future__ import annotations

import pytest

from dynshape.errors import ServeConfigError
from dynshape.serve.scaling import DEFAULT_TARGET_REQUESTS, replica_options


def test_a_fixed_number_of_replicas() -> None:
    assert replica_options(None, None, None, None, 5) == {"num_replicas": 1}
    assert replica_options(3, None, None, None, 5) == {"num_replicas": 3}


def test_autoscaling_bounds_reach_rays_autoscaling_config() -> None:
    assert replica_options(None, 2, 4, 8, 130) == {
        "autoscaling_config": {"min_replicas": 2, "max_replicas": 4, "target_ongoing_requests": 8.0}
    }
    assert replica_options(None, None, 3, None, 5) == {
        "autoscaling_config": {
            "min_replicas": 1,
            "max_replicas": 3,
            "target_ongoing_requests": DEFAULT_TARGET_REQUESTS,
        }
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ((0, None, None, None), "replicas (0) must be an integer >= 1"),
        ((2, 1, 3, None), "replicas (2) is a fixed number: give it or the autoscaling bounds"),
        ((None, 1, None, None), "autoscaling needs max_replicas"),
        ((None, None, None, 4.0), "autoscaling needs max_replicas"),
        ((None, 0, 2, None), "min_replicas (0) and max_replicas (2) must be integers >= 1"),
        ((None, 1, -2, None), "min_replicas (1) and max_replicas (-2) must be integers >= 1"),
        ((None, 3, 2, None), "min_replicas (3) must be <= max_replicas (2)"),
        ((None, 1, 2, 0.0), "target_requests (0.0) must be > 0"),
        ((None, 1, 2, 6.0), "target_requests (6.0) must be <= the requests one replica takes"),
    ],
)
def test_wrong_replica_options_are_refused_with_their_message(
    options: tuple[int | None, int | None, int | None, float | None], message: str
) -> None:
    with pytest.raises(ServeConfigError) as info:
        replica_options(*options, ongoing=5)
    assert message in str(info.value)


def test_the_options_reach_ray_serve() -> None:
    """The application's deployments as Ray Serve will start them: the front (one replica, no
    CPU) bound to the model deployment, which carries the autoscaling bounds."""
    pytest.importorskip("ray.serve")
    import dynshape
    from dynshape.serve.deployment import deployment

    program = (
        "def @main(%x: Tensor[(batch, 3), float32]) -> Tensor[(batch, 3), float32] { exp(%x) }"
    )
    app = deployment(
        dynshape.compile(program),
        batch_symbol="batch",
        max_batch=16,
        min_replicas=2,
        max_replicas=5,
        target_requests=8,
        retries=1,
        name="net",
    )
    front = app._bound_deployment
    assert (front.name, front.num_replicas, front.ray_actor_options) == (
        "net-front",
        1,
        {"num_cpus": 0},
    )
    assert front.init_args[1:] == ("model", 1, False)  # model name, retries, not generating
    model = front.init_args[0]._bound_deployment
    assert model.name == "net" and model.max_ongoing_requests == 32  # 16 rows x (1 thread + 1)
    scaling = model._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas, scaling.target_ongoing_requests) == (
        2,
        5,
        8.0,
    )
    fixed = deployment(dynshape.compile(program), replicas=3)._bound_deployment.init_args[0]
    assert fixed._bound_deployment.num_replicas == 3
    assert fixed._bound_deployment._deployment_config.autoscaling_config is None
