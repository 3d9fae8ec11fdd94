# One image for every role: `runportal --role web` or `--role worker` picks what it runs.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md manage.py ./
COPY agentportal agentportal
COPY runs runs
COPY approvals approvals
RUN pip install --no-cache-dir .
RUN useradd --create-home portal
USER portal
EXPOSE 8000
CMD ["python", "manage.py", "runportal", "--role", "web", "--host", "0.0.0.0"]
