"""What NumPy and scikit-learn added release by release, for :mod:`kfp_spot.packaging.newnames`.

Each table starts at the release the prebuilt executor images pin (NumPy 1.26, scikit-learn 1.6)
and was read from the libraries' own wheels, as each table's comment says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Release = tuple[int, int]


def _by_release(added: Mapping[Release, Mapping[str, str]]) -> dict[str, Release]:
    """``{(2, 0): {"numpy": "concat pow"}}`` -> ``{"numpy.concat": (2, 0), "numpy.pow": ...}``."""
    return {
        f"{module}.{name}": since
        for since, modules in added.items()
        for module, names in modules.items()
        for name in names.split()
    }


@dataclass(frozen=True)
class Library:
    """What one library added after the release an image may pin.

    Attributes:
        distribution: its name on PyPI (as an image's record and a package's requirements give it).
        title: its name in a sentence (``NumPy``).
        root: its top-level module (``numpy``).
        short: how code usually names ``root`` (``np``), for the warning.
        names: each public name a release added (``numpy.concat``) -> that release.
        keywords: each public callable -> each keyword argument a release added -> that release.
        older: the name the table's first release has for the same thing, where there is one.
    """

    distribution: str
    title: str
    root: str
    short: str
    names: Mapping[str, Release]
    keywords: Mapping[str, Mapping[str, Release]] = field(default_factory=dict)
    older: Mapping[str, str] = field(default_factory=dict)

    def shown(self, dotted: str) -> str:
        """``numpy.linalg.vector_norm`` as code shows it: ``np.linalg.vector_norm``."""
        return self.short + dotted.removeprefix(self.root)


NUMPY = Library(
    distribution="numpy",
    title="NumPy",
    root="numpy",
    short="np",
    # Read from the wheels of NumPy 1.26.4, 2.0.2, 2.1.3, 2.2.6, 2.3.5 and 2.4.6: each release's
    # public names (dir() without _ names) of numpy, numpy.linalg, numpy.lib, numpy.dtypes and
    # numpy.exceptions against the release before (numpy.testing's left out). np.bool and np.long
    # are here: NumPy 1.24 removed the old aliases, 2.0 brought the names back as scalar types. A
    # whole new module (numpy.strings) is its name in its parent.
    names=_by_release(
        {
            (2, 0): {
                "numpy": """acos acosh asin asinh astype atan atan2 atanh bitwise_count
                    bitwise_invert bitwise_left_shift bitwise_right_shift bool concat isdtype long
                    matrix_transpose permute_dims pow strings trapezoid ulong unique_all
                    unique_counts unique_inverse unique_values vecdot""",
                "numpy.linalg": """cross diagonal matmul matrix_norm matrix_transpose outer
                    svdvals tensordot trace vecdot vector_norm""",
                "numpy.lib": "array_utils introspect",
                "numpy.dtypes": "StringDType",
                "numpy.exceptions": "RankWarning",
            },
            (2, 1): {"numpy": "cumulative_prod cumulative_sum unstack"},
            (2, 2): {"numpy": "matvec vecmat"},
        }
    ),
    older={
        "numpy.acos": "np.arccos",
        "numpy.acosh": "np.arccosh",
        "numpy.asin": "np.arcsin",
        "numpy.asinh": "np.arcsinh",
        "numpy.atan": "np.arctan",
        "numpy.atan2": "np.arctan2",
        "numpy.atanh": "np.arctanh",
        "numpy.astype": "the array's own .astype()",
        "numpy.bitwise_invert": "np.invert",
        "numpy.bitwise_left_shift": "np.left_shift",
        "numpy.bitwise_right_shift": "np.right_shift",
        "numpy.bool": "np.bool_",
        "numpy.concat": "np.concatenate",
        "numpy.cumulative_sum": "np.cumsum",
        "numpy.cumulative_prod": "np.cumprod",
        "numpy.isdtype": "np.issubdtype",
        "numpy.long": "np.int_",
        "numpy.permute_dims": "np.transpose",
        "numpy.pow": "np.power",
        "numpy.trapezoid": "np.trapz",
        "numpy.ulong": "np.uint",
        "numpy.unique_values": "np.unique",
        "numpy.linalg.matrix_norm": "np.linalg.norm",
        "numpy.linalg.vector_norm": "np.linalg.norm",
        "numpy.linalg.matmul": "np.matmul",
        "numpy.linalg.outer": "np.outer",
        "numpy.linalg.tensordot": "np.tensordot",
        "numpy.linalg.trace": "np.trace",
        "numpy.linalg.diagonal": "np.diagonal",
        "numpy.linalg.cross": "np.cross",
        "numpy.exceptions.RankWarning": "np.RankWarning",
    },
)
"""NumPy from 1.26 (the images' NumPy 1.x) on."""

SCIKIT_LEARN = Library(
    distribution="scikit-learn",
    title="scikit-learn",
    root="sklearn",
    short="sklearn",
    # Read from the wheels of scikit-learn 1.6.1, 1.7.2, 1.8.0 and 1.9.1: the __all__ of each
    # public module (sklearn and its submodules without _ parts, tests or externals) against the
    # release before; 1.7 added no name. HalvingGridSearchCV still needs
    # sklearn.experimental.enable_halving_search_cv in 1.9, as in 1.6: not a new name.
    names=_by_release(
        {
            (1, 8): {
                "sklearn.manifold": "ClassicalMDS",
                "sklearn.metrics": "confusion_matrix_at_thresholds d2_brier_score",
            },
            (1, 9): {"sklearn": "callback", "sklearn.metrics": "metric_at_thresholds"},
        }
    ),
    # The same wheels: the keyword parameters of inspect.signature() of each callable of those
    # __all__ (a class: its constructor's) against the release before. None of these callables
    # takes **kwargs in 1.6.1, so each keyword there is a TypeError.
    keywords={
        "sklearn.config_context": {"sparse_interface": (1, 9)},
        "sklearn.set_config": {"sparse_interface": (1, 9)},
        "sklearn.datasets.make_classification": {"return_X_y": (1, 7)},
        "sklearn.discriminant_analysis.QuadraticDiscriminantAnalysis": {
            "solver": (1, 8),
            "shrinkage": (1, 8),
            "covariance_estimator": (1, 8),
        },
        "sklearn.inspection.DecisionBoundaryDisplay": {
            "multiclass_colors": (1, 7),
            "n_classes": (1, 9),
        },
        "sklearn.inspection.partial_dependence": {"custom_values": (1, 7)},
        "sklearn.linear_model.LinearRegression": {"tol": (1, 7)},
        "sklearn.linear_model.LogisticRegressionCV": {"use_legacy_attributes": (1, 8)},
        "sklearn.manifold.MDS": {"metric_mds": (1, 8), "init": (1, 8), "metric_params": (1, 8)},
        "sklearn.metrics.PrecisionRecallDisplay": {"name": (1, 8)},
        "sklearn.metrics.RocCurveDisplay": {"name": (1, 7)},
        "sklearn.metrics.brier_score_loss": {"labels": (1, 7), "scale_by_half": (1, 7)},
        "sklearn.metrics.class_likelihood_ratios": {"replace_undefined_by": (1, 7)},
        "sklearn.metrics.cohen_kappa_score": {"replace_undefined_by": (1, 9)},
        "sklearn.metrics.d2_log_loss_score": {"y_proba": (1, 9)},
        "sklearn.metrics.det_curve": {"drop_intermediate": (1, 7)},
        "sklearn.metrics.log_loss": {"y_proba": (1, 9)},
        "sklearn.model_selection.check_cv": {"shuffle": (1, 9), "random_state": (1, 9)},
        "sklearn.multioutput.ClassifierChain": {"estimator": (1, 7)},
        "sklearn.multioutput.RegressorChain": {"estimator": (1, 7)},
        "sklearn.neural_network.MLPRegressor": {"loss": (1, 7)},
        "sklearn.pipeline.make_union": {"verbose_feature_names_out": (1, 7)},
        "sklearn.preprocessing.KBinsDiscretizer": {"quantile_method": (1, 7)},
        "sklearn.preprocessing.MaxAbsScaler": {"clip": (1, 8)},
        "sklearn.preprocessing.SplineTransformer": {"handle_missing": (1, 8)},
        "sklearn.utils.column_or_1d": {"input_name": (1, 8)},
        "sklearn.utils.compute_class_weight": {"sample_weight": (1, 7)},
        "sklearn.utils.resample": {"sample_weight": (1, 7)},
    },
)
"""scikit-learn from 1.6 (the images' newest) on."""

LIBRARIES = (NUMPY, SCIKIT_LEARN)
