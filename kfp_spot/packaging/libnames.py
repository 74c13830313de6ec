"""What NumPy, scikit-learn, SciPy and pandas added release by release, for :mod:`.newnames`.

Each table starts at the release the prebuilt executor images pin (NumPy 1.26, scikit-learn 1.6,
SciPy 1.15, pandas 2.2) and was read from the libraries' own wheels, as each table's comment says.
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


def _keywords_by_release(
    added: Mapping[Release, Mapping[str, str]],
) -> dict[str, dict[str, Release]]:
    """Each keyword a release added, by callable: the keys name callables, the values keywords.

    ``{(2, 0): {"numpy.sort numpy.argsort": "stable"}}`` ->
    ``{"numpy.sort": {"stable": (2, 0)}, "numpy.argsort": {"stable": (2, 0)}}``.
    """
    out: dict[str, dict[str, Release]] = {}
    for since, callables in added.items():
        for names, keywords in callables.items():
            for dotted in names.split():
                out.setdefault(dotted, {}).update(dict.fromkeys(keywords.split(), since))
    return out


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
        older: the name the table's first release has for the same thing, where there is one
            (a keyword's key: ``numpy.reshape(shape=)``).
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
    # Each keyword called alone on each of those wheels' callables (numpy, numpy.linalg,
    # numpy.fft; ufuncs left out) whose 2.4.6 signature has it and 1.26.4's has not: dated at the
    # first release where the call is no longer "unexpected keyword argument" (np.clip's min/max
    # and np.savez's allow_pickle are left out: 1.26 takes **kwargs there).
    keywords=_keywords_by_release(
        {
            (2, 0): {
                "numpy.asarray": "copy device",
                "numpy.sort numpy.argsort": "stable",
                "numpy.percentile numpy.quantile numpy.nanpercentile numpy.nanquantile": "weights",
                "numpy.std numpy.var numpy.nanstd numpy.nanvar": "mean correction",
                """numpy.arange numpy.empty numpy.empty_like numpy.eye numpy.full
                numpy.full_like numpy.linspace numpy.ones numpy.ones_like numpy.zeros
                numpy.zeros_like numpy.fft.fftfreq numpy.fft.rfftfreq""": "device",
                "numpy.linalg.cholesky": "upper",
                "numpy.linalg.matrix_rank": "rtol",
                "numpy.linalg.pinv": "rtol",
                """numpy.fft.fft numpy.fft.fft2 numpy.fft.fftn numpy.fft.hfft numpy.fft.ifft
                numpy.fft.ifft2 numpy.fft.ifftn numpy.fft.ihfft numpy.fft.irfft numpy.fft.irfft2
                numpy.fft.irfftn numpy.fft.rfft numpy.fft.rfft2 numpy.fft.rfftn""": "out",
            },
            (2, 1): {
                "numpy.asanyarray numpy.from_dlpack": "copy device",
                "numpy.reshape": "shape copy",
                "numpy.set_printoptions": "override_repr",
            },
            (2, 2): {"numpy.trim_zeros": "axis"},
            (2, 3): {"numpy.unique": "sorted"},
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
        "numpy.reshape(shape=)": "newshape=",
        **dict.fromkeys(
            [f"numpy.{f}(correction=)" for f in ("std", "var", "nanstd", "nanvar")], "ddof="
        ),
        "numpy.linalg.pinv(rtol=)": "rcond=",
        "numpy.linalg.matrix_rank(rtol=)": "tol=",
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
    keywords=_keywords_by_release(
        {
            (1, 7): {
                "sklearn.datasets.make_classification": "return_X_y",
                "sklearn.inspection.DecisionBoundaryDisplay": "multiclass_colors",
                "sklearn.inspection.partial_dependence": "custom_values",
                "sklearn.linear_model.LinearRegression": "tol",
                "sklearn.metrics.RocCurveDisplay": "name",
                "sklearn.metrics.brier_score_loss": "labels scale_by_half",
                "sklearn.metrics.class_likelihood_ratios": "replace_undefined_by",
                "sklearn.metrics.det_curve": "drop_intermediate",
                "sklearn.multioutput.ClassifierChain sklearn.multioutput.RegressorChain": (
                    "estimator"
                ),
                "sklearn.neural_network.MLPRegressor": "loss",
                "sklearn.pipeline.make_union": "verbose_feature_names_out",
                "sklearn.preprocessing.KBinsDiscretizer": "quantile_method",
                "sklearn.utils.compute_class_weight sklearn.utils.resample": "sample_weight",
            },
            (1, 8): {
                "sklearn.discriminant_analysis.QuadraticDiscriminantAnalysis": (
                    "solver shrinkage covariance_estimator"
                ),
                "sklearn.linear_model.LogisticRegressionCV": "use_legacy_attributes",
                "sklearn.manifold.MDS": "metric_mds init metric_params",
                "sklearn.metrics.PrecisionRecallDisplay": "name",
                "sklearn.preprocessing.MaxAbsScaler": "clip",
                "sklearn.preprocessing.SplineTransformer": "handle_missing",
                "sklearn.utils.column_or_1d": "input_name",
            },
            (1, 9): {
                "sklearn.config_context sklearn.set_config": "sparse_interface",
                "sklearn.inspection.DecisionBoundaryDisplay": "n_classes",
                "sklearn.metrics.cohen_kappa_score": "replace_undefined_by",
                "sklearn.metrics.d2_log_loss_score": "y_proba",
                "sklearn.metrics.log_loss": "y_proba",
                "sklearn.model_selection.check_cv": "shuffle random_state",
            },
        }
    ),
    older={
        "sklearn.metrics.log_loss(y_proba=)": "y_pred=",
        "sklearn.metrics.d2_log_loss_score(y_proba=)": "y_pred=",
        "sklearn.metrics.RocCurveDisplay(name=)": "estimator_name=",
        "sklearn.metrics.PrecisionRecallDisplay(name=)": "estimator_name=",
        "sklearn.multioutput.ClassifierChain(estimator=)": "base_estimator=",
        "sklearn.multioutput.RegressorChain(estimator=)": "base_estimator=",
    },
)
"""scikit-learn from 1.6 (the images' newest) on."""


def _in(module: str, names: str) -> str:
    """``_in("scipy.stats", "gstd trim_mean")`` -> ``"scipy.stats.gstd scipy.stats.trim_mean"``."""
    return " ".join(f"{module}.{name}" for name in names.split())


_WINDOWS = _in(
    "scipy.signal.windows",
    """barthann bartlett blackman blackmanharris bohman boxcar chebwin cosine dpss exponential
    flattop gaussian general_gaussian general_hamming get_window hamming hann kaiser
    kaiser_bessel_derived lanczos nuttall parzen taylor triang tukey""",
)

SCIPY = Library(
    distribution="scipy",
    title="SciPy",
    root="scipy",
    short="scipy",
    # Read from the wheels of SciPy 1.15.2, 1.16.3 and 1.17.1 (the newest for Python 3.11): the
    # __all__ of scipy and each public submodule against the release before.
    names=_by_release(
        {
            (1, 16): {
                "scipy.io.matlab": "MatWriteWarning",
                "scipy.ndimage": "vectorized_filter",
                "scipy.signal": "closest_STFT_dual_window firwin_2d",
                "scipy.spatial.transform": "RigidTransform",
                "scipy.stats": "Binomial quantile",
            },
            (1, 17): {
                "scipy.sparse": "expand_dims permute_dims swapaxes",
                "scipy.sparse.linalg": "funm_multiply_krylov",
                "scipy.stats": "Logistic matrix_t spearmanrho",
            },
        }
    ),
    # The same wheels: each keyword a 1.17.1 signature has and 1.15.2's has not, called with
    # arguments the callable takes on each wheel and dated at the first release where that call is
    # no longer "unexpected keyword argument". SciPy's decorators make both signatures and a call
    # without data mislead: 1.15.2's signatures of kmeans and bootstrap lack seed= and
    # random_state=, which its decorators take all the same, and stats' axis=/nan_policy= wrappers
    # refuse a keyword without samples that they take with them.
    keywords=_keywords_by_release(
        {
            (1, 16): {
                _in(
                    "scipy.stats",
                    "boxcox_llf linregress pointbiserialr siegelslopes theilslopes weightedtau",
                ): "axis nan_policy keepdims",
                """scipy.stats.chisquare scipy.stats.mstats.chisquare scipy.stats.gstd
                scipy.stats.power_divergence""": "nan_policy keepdims",
                "scipy.stats.kendalltau": "axis keepdims",
                "scipy.stats.f_oneway scipy.stats.tukey_hsd": "equal_var",
                "scipy.interpolate.RectBivariateSpline": "maxit",
                "scipy.interpolate.make_smoothing_spline": "axis",
                "scipy.optimize.least_squares": "callback workers",
                _WINDOWS + " scipy.signal.get_window": "xp device",
            },
            (1, 17): {
                "scipy.stats.yeojohnson_llf": "axis nan_policy keepdims",
                "scipy.stats.trim_mean": "nan_policy keepdims",
                "scipy.stats.median_abs_deviation": "keepdims",
                "scipy.stats.anderson": "method",
                "scipy.stats.anderson_ksamp": "variant",
                "scipy.linalg.inv": "assume_a lower",
                "scipy.sparse.linalg.eigs scipy.sparse.linalg.eigsh": "rng",
                "scipy.signal.hilbert2": "axes",
                """scipy.interpolate.generate_knots scipy.interpolate.make_splprep
                scipy.interpolate.make_splrep""": "bc_type",
                "scipy.interpolate.FloaterHormannInterpolator": "axis",
                """scipy.signal.besselap scipy.signal.buttap scipy.signal.cheb1ap
                scipy.signal.cheb2ap scipy.signal.ellipap scipy.signal.gammatone
                scipy.signal.iircomb scipy.signal.iirnotch scipy.signal.iirpeak
                scipy.signal.savgol_coeffs""": "xp device",
            },
        }
    ),
)
"""SciPy from 1.15 (the images' newest) on."""

_GROUPBYS = """DatetimeIndexResamplerGroupBy ExpandingGroupBy ExponentialMovingWindowGroupBy
    PeriodIndexResamplerGroupBy RollingGroupBy TimedeltaIndexResamplerGroupBy"""

PANDAS = Library(
    distribution="pandas",
    title="pandas",
    root="pandas",
    short="pd",
    # Read from the wheels of pandas 2.2.3, 2.3.3, 3.0.2 and 3.1.1: the __all__ of pandas, its
    # api, errors, io and tseries modules and the methods of DataFrame and Series against the
    # release before, each name then looked up on each wheel (pandas.api.internals imports from
    # 3.0, before its parent lists it). What pandas 3 changed in behaviour (strings as their own
    # dtype, copy-on-write) and the methods of a frame in a variable are not names this can read.
    names=_by_release(
        {
            (3, 0): {
                "pandas": "col read_iceberg",
                "pandas.DataFrame": "from_arrow",
                "pandas.Series": "from_arrow",
                "pandas.api": "executors internals",
                "pandas.api.typing": "Expression FrozenList NoDefault SASReader",
                "pandas.errors": """IncompatibleFrequency Pandas4Warning Pandas5Warning
                    PandasChangeWarning PandasDeprecationWarning PandasFutureWarning
                    PandasPendingDeprecationWarning""",
                "pandas.io": "iceberg",
                "pandas.tseries.offsets": "BHalfYearBegin BHalfYearEnd HalfYearBegin HalfYearEnd",
            },
            (3, 1): {
                "pandas": "NamedFunc",
                "pandas.DataFrame": "select",
                "pandas.api.typing": _GROUPBYS,
            },
        }
    ),
    # The same wheels, each called with the keyword: "unexpected keyword argument" before.
    keywords=_keywords_by_release(
        {(2, 3): {"pandas.StringDtype": "na_value"}, (3, 1): {"pandas.concat": "union_categories"}}
    ),
    older={
        f"pandas.api.typing.{name}": f"pd.api.typing.{name.removesuffix('GroupBy')}Groupby"
        for name in _GROUPBYS.split()
    },
)
"""pandas from 2.2 (the images' newest) on."""

LIBRARIES = (NUMPY, SCIKIT_LEARN, SCIPY, PANDAS)
