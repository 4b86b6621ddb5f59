"""JupyterHub for the course: a teacher and students, each under their own Unix account.

setup.sh copies this file to <prefix>/hub/ and writes <prefix>/etc/course.json beside it (the
accounts, the domain, the ports and the folders), so the file itself names no machine. It sets up:

- login with the machine's own accounts (PAM); only the course's accounts may log in;
- each user's JupyterLab runs as that user (LocalProcessSpawner), on 127.0.0.1;
- per-user subdomains (`teacher.hub.example.org`): every server is an origin of its own, so the
  servers keep Jupyter's `frame-ancestors 'self'` and the formgrader opens inside the teacher's
  JupyterLab (nbgrader #1870: without subdomains JupyterHub 4.1+ forbids all framing);
- a role per kind of account: JUPYTER_CONFIG_PATH points the teacher's server at `etc/teacher/`
  (nbgrader's formgrader and create-assignment) and a student's at `etc/student/` (the assignment
  list and Validate only);
- the formgrader as a hub-managed service of the course, run as the teacher, open to the
  `teachers` group by a role and to nobody else.
"""

import json
from pathlib import Path

c = get_config()  # noqa: F821 - provided by traitlets when it executes this file

settings = json.loads((Path(__file__).resolve().parent.parent / "etc" / "course.json").read_text())
prefix = Path(settings["prefix"])
teacher, students = settings["teacher"], settings["students"]
course_id = settings["course_id"]
scheme_and_host = f"http://{settings['domain']}:{settings['port']}"

# The proxy listens on `ip`; each user's server answers on <user>.<domain>, the hub on <domain>.
c.JupyterHub.bind_url = f"http://{settings['ip']}:{settings['port']}"
c.JupyterHub.subdomain_host = scheme_and_host
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = settings["hub_port"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{settings['proxy_api_port']}"
c.ConfigurableHTTPProxy.command = [str(prefix / "proxy" / "node_modules" / ".bin"
                                       / "configurable-http-proxy")]

# The hub's state: its database, cookie secret and proxy token stay across restarts, so that a
# restart between submit and collect logs nobody out and loses nothing.
state = prefix / "hub"
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
# Users' servers (and their kernels) keep running while the hub restarts; the hub finds them again.
c.JupyterHub.cleanup_servers = False

c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {teacher, *students}
# No account is a hub admin: an admin could open every student's server.
c.Authenticator.admin_users = set()

c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(prefix / "venv" / "bin" / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.ip = "127.0.0.1"
# A first start imports JupyterLab and nbgrader from a cold disk.
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.JupyterHub.load_groups = {"teachers": {"users": [teacher]}}


def role_of(spawner) -> str:
    return "teacher" if any(group.name == "teachers" for group in spawner.user.groups) else "student"


# The course's environment first on PATH: nbgrader runs its `alembic` command, the terminal its
# `python`; whatever PATH the hub itself was started with (root's) is not the users'.
user_path = f"{prefix / 'venv' / 'bin'}:/usr/local/bin:/usr/bin:/bin"
c.Spawner.environment = {
    "PATH": user_path,
    "JUPYTER_CONFIG_PATH": lambda spawner: str(prefix / "etc" / role_of(spawner)),
    # The kernels' torch on as many threads as the machine has cores, shared by every user.
    "OMP_NUM_THREADS": str(settings.get("omp_threads", 1)),
}

c.JupyterHub.services = [
    {
        "name": course_id,
        "url": f"http://127.0.0.1:{settings['service_port']}",
        "command": [str(prefix / "venv" / "bin" / "jupyterhub-singleuser")],
        "user": teacher,
        "cwd": settings["teacher_home"],
        "environment": {
            "JUPYTERHUB_DEFAULT_URL": "/formgrader",
            "PATH": user_path,
            "JUPYTER_CONFIG_PATH": str(prefix / "etc" / "teacher"),
            "OMP_NUM_THREADS": str(settings.get("omp_threads", 1)),
        },
        "oauth_no_confirm": True,
    }
]
c.JupyterHub.load_roles = [
    {
        "name": f"{course_id}-teachers",
        "description": "open the course's formgrader service",
        "groups": ["teachers"],
        "scopes": [f"access:services!service={course_id}"],
    }
]
