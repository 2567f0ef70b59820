"""The tuner's one reach past Optuna's public API, Study._storage (a study's storage: Optuna has no public getter), and the
storage's public methods for what Study has none for: taking a waiting trial without making one (Study.ask() makes one
where none waits) and failing another worker's trial. tests/test_tune.py checks them against the installed Optuna."""


def storage_of(study):
    """The storage `study` reads and writes: Study._storage (private)."""
    import optuna

    storage = getattr(study, "_storage", None)
    if not isinstance(storage, optuna.storages.BaseStorage):
        raise RuntimeError(f"optuna {optuna.__version__}: optuna.study.Study._storage is no storage here "
                           f"({type(storage).__name__}); benchmark/tune_optuna.py relies on it")  # fmt: skip
    return storage


def trial_id(study, number):
    """The storage's id of the study's trial `number`."""
    storage = storage_of(study)
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


def take_waiting(study):
    """A waiting trial made running, as an optuna.Trial; None where none waits. The storage sets a trial RUNNING once: a
    worker that comes second is told False (or UpdateFinishedTrialError, the trial ended meanwhile) and tries the next."""
    import optuna
    from optuna.trial import TrialState

    for waiting in study.get_trials(deepcopy=False, states=[TrialState.WAITING]):
        key = trial_id(study, waiting.number)
        try:
            if storage_of(study).set_trial_state_values(key, TrialState.RUNNING):
                return optuna.Trial(study, key)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass
    return None


def fail_running(study, trial, why):
    """Fails another worker's running trial (a FrozenTrial), its user attribute "failed" `why`; False where it has ended
    meanwhile (another worker was first)."""
    import optuna
    from optuna.trial import TrialState

    key = trial_id(study, trial.number)
    try:
        storage_of(study).set_trial_user_attr(key, "failed", why)
        return storage_of(study).set_trial_state_values(key, TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
